"""The peer benchmark's readings, checked on recorded log lines: what bench/peers.py reads from
OpenNMT-py's and JoeyNMT's logs (throughput, checkpoints, decoding time), how it runs and
measures a command, and how bench/run.py writes commands into the report. No peer is installed
or run: the logs below are excerpts in the toolkits' own formats (OpenNMT-py 3.5.1:
onmt/utils/statistics.py and model_saver.py; JoeyNMT 2.3.0: joeynmt/training.py and
prediction.py), prefixed with the seconds since launch as bench/peers.py records them.

bench/ is not a package: its modules are loaded from their files.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from bench_scripts import BENCH, load

logs = load("peer_logs")
harness = load("harness")


def recorded(text: str) -> list[tuple[float, str]]:
    """A log as bench/peers.py writes it (``{t:9.3f} {line}``, a ``#`` command line first)
    back into ``(t, line)`` pairs."""
    lines = []
    for row in text.splitlines():
        if row.strip() and not row.startswith("#"):
            t, line = row.strip().split(" ", 1)
            lines.append((float(t), line))
    return lines


ONMT_TRAIN = """\
# /venvs/onmt/bin/onmt_train -config /work/onmt/train.yaml
   12.004 [2026-11-23 10:00:12,003 INFO] Starting training on CPU, could be very slow
   12.950 [2026-11-23 10:00:12,949 INFO] Start training loop and validate every 10000000 steps...
   21.530 [2026-11-23 10:00:21,529 INFO] Step  1/10000000; acc: 0.0; ppl: 9186.3; xent: 9.1; \
lr: 0.00000; sents:     110; bsz: 1830/2004/110;  85/ 93 tok/s;     21 sec;
   22.530 [2026-11-23 10:00:22,529 INFO] Step  2/10000000; acc: 0.1; ppl: 9001.2; xent: 9.1; \
lr: 0.00001; sents:     120; bsz: 1800/2000/120; 1800/2000 tok/s;     22 sec;
   24.530 [2026-11-23 10:00:24,529 INFO] Step  4/10000000; acc: 1.5; ppl: 7001.2; xent: 8.9; \
lr: 0.00001; sents:     200; bsz: 1700/1900/100; 1700/1900 tok/s;     24 sec;
   25.530 [2026-11-23 10:00:25,529 INFO] Step  5/10000000; acc: 1.9; ppl: 6500.0; xent: 8.8; \
lr: 0.00001; sents:      30; bsz:  830/ 904/30;  830/ 904 tok/s;     25 sec;
   25.600 [2026-11-23 10:00:25,599 INFO] Saving checkpoint {ckpt}
"""


def test_onmt_throughput_is_tokens_of_each_window_over_the_time_between_reports() -> None:
    lines = recorded(ONMT_TRAIN.format(ckpt="/w/model_step_5.pt"))
    result = logs.onmt_throughput(lines)
    # Windows after the first report: 1 step of 1800+2000, 2 of 1700+1900, 1 of 830+904.
    tokens = 3800 + 2 * 3600 + 1734
    assert result["tokens_per_s"] == round(tokens / 4.0, 1)  # 21.53 s -> 25.53 s
    assert result["measured_steps"] == 4
    assert result["tokens_per_step"] == round(tokens / 4, 1)
    assert result["s_per_step"] == 1.0


def test_onmt_throughput_needs_two_reports() -> None:
    lines = recorded(ONMT_TRAIN.format(ckpt="x"))[:3]
    assert logs.onmt_throughput(lines) == {"tokens_per_s": None, "reports": 1}


def test_training_starts_at_the_first_step_report_not_at_start_up_messages() -> None:
    lines = recorded(ONMT_TRAIN.format(ckpt="x"))
    first = next(t for t, line in lines if logs.ONMT_START.search(line))
    assert first == 21.53
    joey = recorded(JOEY_TRAIN)
    assert next(t for t, line in joey if logs.JOEY_START.search(line)) == 20.0


def test_an_onmt_checkpoint_counts_once_its_file_is_complete(tmp_path: Path) -> None:
    path = tmp_path / "model_step_5.pt"
    lines = recorded(ONMT_TRAIN.format(ckpt=path))
    assert logs.onmt_checkpoint(lines, 25.0) is None  # announced, not written yet
    path.write_bytes(b"PK\x03\x04 half a zip")
    assert logs.onmt_checkpoint(lines, 25.0) is None  # being written
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data.pkl", b"weights")
    assert logs.onmt_checkpoint(lines, 25.0) == (5, str(path), 25.6)
    assert logs.onmt_checkpoint(lines, 26.0) is None  # none announced after the budget


JOEY_TRAIN = """\
# /venvs/joey/bin/python -m joeynmt train /work/joey/train.yaml --skip-test
    9.000 2026-11-23 10:00:09,000 - INFO - joeynmt.training - Train stats:
   20.000 2026-11-23 10:00:20,000 - INFO - joeynmt.training - Epoch   1, Step:        1, \
Batch Loss:     9.123456, Batch Acc: 0.000123, Tokens per Sec:      812, Lr: 0.000003
   21.000 2026-11-23 10:00:21,000 - INFO - joeynmt.training - Epoch   1, Step:        2, \
Batch Loss:     9.010000, Batch Acc: 0.001200, Tokens per Sec:     1800, Lr: 0.000005
   21.500 2026-11-23 10:00:21,500 - INFO - joeynmt.prediction - Predicting 16 example(s)... \
(Greedy decoding with min_output_length=1, max_output_length=100)
   27.000 2026-11-23 10:00:27,000 - INFO - joeynmt.prediction - Evaluation result (greedy) \
bleu:   0.00, loss:   8.90, ppl: 7332.00, acc:   0.01, 5.2000[sec]
   30.000 2026-11-23 10:00:30,000 - INFO - joeynmt.training - Epoch   1, Step:        4, \
Batch Loss:     8.800000, Batch Acc: 0.010000, Tokens per Sec:     2000, Lr: 0.000010
   32.000 2026-11-23 10:00:32,000 - INFO - joeynmt.training - Epoch   1, Step:        6, \
Batch Loss:     8.600000, Batch Acc: 0.020000, Tokens per Sec:     2000, Lr: 0.000015
   33.100 2026-11-23 10:00:33,100 - INFO - joeynmt.training - Interrupt at epoch 1, step 6.
   33.900 2026-11-23 10:00:33,900 - INFO - joeynmt.training - Checkpoint saved in \
/work/joey/model/6.ckpt.
"""


def test_joey_throughput_leaves_out_windows_with_a_validation() -> None:
    result = logs.joey_throughput(recorded(JOEY_TRAIN), src_tgt_ratio=0.9)
    # Windows: 1->2 (1 s at 1800 tgt tok/s) counts, 2->4 holds a validation, 4->6 (2 s at 2000).
    tgt_rate = (1800 * 1 + 2000 * 2) / 3
    assert result["tgt_tokens_per_s"] == round(tgt_rate, 1)
    assert result["tokens_per_s"] == round(tgt_rate * 1.9, 1)
    assert result["measured_steps"] == 3 and result["measured_seconds"] == 3.0


def test_joey_throughput_without_two_reports_is_not_measured() -> None:
    assert logs.joey_throughput(recorded(JOEY_TRAIN)[:2], 1.0) == {"tokens_per_s": None}


def test_joey_checkpoint_is_the_one_saved_after_the_budget() -> None:
    lines = recorded(JOEY_TRAIN)
    assert logs.joey_checkpoint(lines, 33.0) == (6, "/work/joey/model/6.ckpt", 33.9)
    assert logs.joey_checkpoint(lines, 34.0) is None
    # A directory with digits in its name does not confuse the step.
    line = "... - Checkpoint saved in /tmp/bench-3/joey/model/1234.ckpt."
    assert logs.joey_checkpoint([(5.0, line)], 0.0) == (1234, "/tmp/bench-3/joey/model/1234.ckpt",
                                                        5.0)


def test_the_decoding_time_is_the_toolkits_own_last_report() -> None:
    onmt = ("[2026-11-23 10:01:00,000 INFO] PRED SCORE: -0.4, PRED PPL: 1.5 NB SENTENCES: 1000\n"
            "[2026-11-23 10:01:00,000 INFO] Total translation time (s): 3.5\n"
            "[2026-11-23 10:01:00,000 INFO] Average translation time (ms): 3.5\n")
    assert logs.reported_seconds(onmt, logs.ONMT_TIME) == 3.5
    joey = ("2026-11-23 10:01:00,000 - INFO - joeynmt.prediction - Generation took 0.0500[sec].\n"
            "2026-11-23 10:02:00,000 - INFO - joeynmt.prediction - Generation took 12.3456[sec].\n")
    assert logs.reported_seconds(joey, logs.JOEY_TIME) == 12.3456
    assert logs.reported_seconds("no timing here\n", logs.JOEY_TIME) is None


def test_the_ctranslate2_figures_come_from_its_result_line() -> None:
    text = 'warning: something\nRESULT {"load_s": 0.2, "greedy": 1.5, "beam5": 3.0}\n'
    assert logs.ct2_result(text) == {"load_s": 0.2, "greedy": 1.5, "beam5": 3.0}
    with pytest.raises(RuntimeError, match="no RESULT line"):
        logs.ct2_result("Traceback ...\n")


# --- running and measuring a command ------------------------------------------------------

def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_measured_command_keeps_its_output_and_its_log(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    done = harness.run_measured(python("import sys; print('out'); print('err', file=sys.stderr)"),
                                log_path=log)
    assert done.stdout == "out\n" and done.stderr == "err\n"
    assert log.read_text() == "err\nout\n"  # stderr, then the captured stdout
    assert done.seconds > 0 and done.peak_rss_mb > 1 and done.stopped_s == 0


def test_a_measured_command_reads_and_writes_the_files_given(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("a b\nc\n")
    done = harness.run_measured(python("import sys; sys.stdout.write(sys.stdin.read().upper())"),
                                stdin=tmp_path / "in.txt", stdout=tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_text() == "A B\nC\n"
    assert done.stdout == ""


def test_a_failing_command_raises_with_its_last_lines() -> None:
    with pytest.raises(harness.CommandFailed, match=r"failed \(3\):\nbroken"):
        harness.run_measured(python("import sys; print('broken', file=sys.stderr); sys.exit(3)"))


# --- the peers' decoding, end to end with a stand-in toolkit ------------------------------

@pytest.fixture(scope="module")
def peers() -> ModuleType:
    return load("peers")


def decoded(peers: ModuleType, tmp_path: Path, tokenizer_path: Path, timing: str) -> dict:
    """decode_test_set with a stand-in translate command that copies its input (source pieces
    as the translation) and reports ``timing`` on stderr like JoeyNMT."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    data = tmp_path / "data"
    data.mkdir()
    sources = ["The dog runs .", "A cat sleeps on the sofa ."]
    (data / "test.en").write_text(
        "".join(" ".join(tok.encode(s, add_special_tokens=False).tokens) + "\n"
                for s in sources), encoding="utf-8")
    (data / "test.ref.de").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    args = SimpleNamespace(src="en", tgt="de", tokenizer=tokenizer_path)
    copy = f"import sys; sys.stdout.write(sys.stdin.read()); print({timing!r}, file=sys.stderr)"
    out = tmp_path / "peer"
    out.mkdir()
    return peers.decode_test_set(
        args, {"dir": str(data)}, out, {},
        lambda beam, src, hyp: peers.Invocation(python(copy), stdin=src, stdout=hyp),
        logs.JOEY_TIME, "joeynmt 'Generation took'", "64 sentences")


def test_decoding_is_scored_and_timed_by_the_toolkits_own_report(
        peers: ModuleType, tmp_path: Path, tokenizer_path: Path) -> None:
    results = decoded(peers, tmp_path, tokenizer_path, "Generation took 0.5000[sec].")
    assert set(results) == {"greedy", "beam5"}
    for mode in results.values():
        assert mode["seconds"] == 0.5 and mode["timing"] == "joeynmt 'Generation took'"
        assert mode["sentences"] == 2 and mode["sent_per_s"] == 4.0
        assert mode["bleu"] == 100.0  # the copy is the reference
        assert mode["batch"] == "64 sentences"
    assert (tmp_path / "peer" / "one.src").read_text().count("\n") == 1


def test_without_its_own_report_decoding_is_timed_against_a_one_line_run(
        peers: ModuleType, tmp_path: Path, tokenizer_path: Path) -> None:
    results = decoded(peers, tmp_path, tokenizer_path, "no timing")
    for mode in results.values():
        assert mode["timing"] == "wall - 1-line wall"
        # The wall time less that of the 1-line run (start-up and model load).
        assert abs(mode["seconds"] - mode["wall_minus_1line_s"]) <= 0.005
        assert mode["wall_s"] > mode["seconds"]


def test_a_failing_peer_is_recorded_and_the_others_go_on(peers: ModuleType) -> None:
    peer: dict = {}
    with peers.failure_recorded(peer, "JoeyNMT"):
        raise RuntimeError("pip failed (1):\nno space left on device")
    assert peer["error"] == "RuntimeError: pip failed (1):\nno space left on device"
    table = peers.table({"peers": {"joey": peer}})
    assert "JoeyNMT  error: RuntimeError: pip failed (1):" in table.splitlines()[1]


def test_the_peers_environments_go_to_a_per_user_cache_unless_told(
        peers: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TFM_BENCH_VENVS", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert peers.default_venvs() == tmp_path / ".cache" / "tfm-bench"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert peers.default_venvs() == tmp_path / "cache" / "tfm-bench"
    monkeypatch.setenv("TFM_BENCH_VENVS", str(tmp_path / "venvs"))
    assert peers.default_venvs() == tmp_path / "venvs"


# --- the report ------------------------------------------------------------------------------

def test_report_commands_hold_no_path_of_the_machine_they_ran_on() -> None:
    run = load("run")
    repo = BENCH.parent
    # Paths outside the repository's parent, wherever the repository was cloned.
    elsewhere = Path("/nonexistent-tfm-bench-root")
    work = elsewhere / "bench-7"
    command = " ".join([sys.executable, "bench/peers.py", "--data",
                        str(repo.parent / "shared" / "data" / "multi30k"), "--tokenizer",
                        f"{work}/tfm/tokenizer.json", "--work", str(work), "--json",
                        str(elsewhere / "tmp" / "peers.json"), "--threads", "2"])
    assert run.portable(command, work) == (
        "python bench/peers.py --data ../shared/data/multi30k --tokenizer "
        "$WORK/tfm/tokenizer.json --work $WORK --json peers.json --threads 2")
    assert run.portable(f"x --json {work}.json", work) == f"x --json {work.name}.json"


def test_the_report_records_commands_relative_to_the_repository(tmp_path: Path) -> None:
    run = load("run")
    work = tmp_path / "work"
    data = BENCH.parent.parent / "shared" / "data" / "multi30k"
    decode = {"sent_per_s": 100.0, "pieces_per_s": 1000.0, "bleu": 20.0, "peak_rss_mb": 400.0}
    results = {
        "argv": ["--work", str(work), "--peers", ""], "work": str(work), "date": "2026-11-25",
        "threads": 2, "train_minutes": 1.0, "seconds": 60,
        "tfm": {"machine": {"cpu": "a CPU", "torch": "2.13.0", "fp32_gflops": 300.0},
                "step": {"max_tokens": 4096, "tokens_per_s": 5000.0, "matmul_gflops": 100.0,
                         "padding_fraction": 0.05},
                "train": {"tokens_per_s": 6000.0, "steps": 10, "train_s": 60,
                          "peak_rss_mb": 1000.0},
                "decode": {"greedy": decode, "beam5": decode},
                "train_tokenizer_s": 1.5, "prepare_s": 2.5},
    }
    commands = [f"{sys.executable} -m tfm prepare --train {data}/train -o {work}/tfm/data"]
    report = tmp_path / "BENCHMARKS.md"
    run.write_report(results, report, commands)
    text = report.read_text()
    assert "python -m tfm prepare --train ../shared/data/multi30k/train -o $WORK/tfm/data" in text
    assert "`python bench/run.py --work $WORK --peers ''`" in text
    assert str(tmp_path) not in text and sys.executable not in text
