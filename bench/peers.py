"""Peer toolkits on Multi30k en->de: OpenNMT-py, CTranslate2 and JoeyNMT, measured like tfm.

    python bench/peers.py --data ../shared/data/multi30k --tokenizer TOKENIZER.json --work DIR \
        [--peers onmt,ct2,joey] [--train-minutes 10] [--threads 2] [--json OUT.json]

Run it from the repository root with tfm's virtual environment active (tfm must be importable:
the text is normalised with ``tfm.data.text.normalize_text`` and scored with
``tfm.decoding.scoring.bleu``).
tfm never imports this file. What it does, in order:

1. Setup. Each peer gets its own virtual environment under ``--venvs`` (outside the repository;
   default: ``$TFM_BENCH_VENVS``, else the per-user cache ``$XDG_CACHE_HOME/tfm-bench``, that is
   ``~/.cache/tfm-bench`` where XDG_CACHE_HOME is not set): ``onmt`` holds OpenNMT-py 3.5.1 and
   CTranslate2 4.8.5 (its converter needs OpenNMT-py), ``joey`` holds JoeyNMT 2.3.0.
   ``torch==2.13.0`` is installed first in each (a CPU wheel on these machines), and every later
   install runs with a constraint file pinning it, so pip never resolves torch itself (any other
   version would pull gigabytes of CUDA packages). OpenNMT-py declares torch<2.3: it is
   installed with ``--no-deps`` and its imports by hand. Installed versions are checked first,
   so a second run installs nothing.
2. Data. train / val / test_2016_flickr, both languages, normalised like tfm and encoded with
   the same byte-level BPE (``--tokenizer``, from ``tfm train-tokenizer``), written as
   pre-tokenized files (pieces joined by spaces). Every peer reads these files; its output
   pieces are mapped back to ids and decoded with the same tokenizer, then scored with
   sacrebleu against the raw German references.
3. Training (OpenNMT-py, JoeyNMT): the model of shared/peers/README.md -- Transformer d_model
   256, 3+3 layers, 4 heads, FFN 1024, dropout 0.1, one joint vocabulary, embeddings shared
   and tied to the output, label smoothing 0.1, Adam (0.9, 0.98), noam schedule warmup 400 with
   factor 0.32 (a peak of 1e-3, as in tfm's Multi30k recipe: with shared/peers/README.md's
   warmup 4000 a 10-minute model has not learnt to stop, and its decoding speed says nothing),
   batches of 4096 tokens, fp32, pre-norm (OpenNMT-py's Transformer; set for JoeyNMT),
   ``--threads`` threads (OMP_NUM_THREADS / MKL_NUM_THREADS), each toolkit's own data loading
   (OpenNMT-py: 2 loader processes filling length buckets of 262,144 examples; JoeyNMT: random
   token batches in the main process). Both report every step; each trains for
   ``--train-minutes`` of wall clock counted from the report of its first step (start-up,
   bucket filling and the first step excluded). Then OpenNMT-py runs on to its next periodic
   checkpoint (every 20 steps) and is stopped; JoeyNMT, which does not validate here, gets
   SIGINT, on which it saves a checkpoint and exits. That checkpoint is the model decoded; the
   training seconds reported run from the first step's report to its save. A process seen
   stopped (SIGSTOP from outside) is reported in ``stopped_s``: its timings are then not valid.
   Throughput, in non-padding source + target tokens per second, is read from the toolkit's
   own log lines, timestamped here as they arrive, from the first step's report to the last:
   - OpenNMT-py reports, for each window between reports, the mean source and target tokens
     per batch (source pieces; target pieces + </s>): tokens are summed over the windows and
     divided by the wall time between the first and the last report.
   - JoeyNMT reports only target tokens per second (pieces + </s>) for each window (its own
     validation time excluded; windows that contain a validation are left out): the rates are
     weighted by the windows' wall time, and scaled by (source + target) / target tokens of
     the training corpus (source pieces + </s>, target pieces + </s>): an estimate, since its
     batches are random samples of that corpus.
   Peak RSS: the kernel's high-water mark (VmHWM) of the training process, read just before it
   is stopped; ``peak_rss_tree_mb`` adds those of its worker processes (OpenNMT-py's data
   loaders; pages they share are counted in each).
4. Decoding test_2016_flickr (1,000 sentences), greedy and beam 5, ``--threads`` threads, each
   peer's default batch (OpenNMT-py 30 sentences, JoeyNMT 64 sentences), model load excluded:
   the seconds are the toolkit's own timing of its decoding loop (OpenNMT-py ``-report_time``,
   JoeyNMT "Generation took"); the wall time of the command minus that of the same command on
   a 1-line input is recorded beside it. CTranslate2: the OpenNMT-py checkpoint converted
   (``--unsafe_deserialization``, ``self_attn_type`` rewritten to ``scaled-dot`` in a copy of
   its options; the weights are unchanged), translated with the Python API in float32,
   ``intra_threads=--threads``, ``max_batch_size=2048, batch_type="tokens"``, timed in-process
   around ``translate_batch`` after a 1-sentence warm-up. Reported: seconds, sentences/s,
   target pieces/s (pieces of the output, </s> excluded), BLEU and its signature. Output
   lengths are capped by each peer's default (OpenNMT-py: 1.25 x source length, at most 250;
   JoeyNMT: 1.5 x the longest source of the batch), except CTranslate2, whose only cap is an
   absolute one (256 by default): it gets 1.5 x the longest test source + 10, the cap tfm
   gives that sentence (a single output that never ends holds up its whole batch to the cap).
   A model trained too briefly to emit </s> decodes up to those caps, and its speed then says
   little (``--max-length N`` caps all of them at N pieces, for short debug runs).
5. A table on stdout, and everything in ``--json``: a dict per peer with the versions, the
   training figures, each decoding mode, and the wall time of each phase.

Every peer runs in its own processes; a failing peer is recorded with its error and the others
go on. Work files go to ``--work`` (logs: ``WORK/PEER/*.log``). What the peers' log lines look like
and how the figures are read from them: bench/peer_logs.py.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import add_corpus_options, log, process_stopped, run_measured  # noqa: E402
from machine import describe  # noqa: E402
from peer_logs import (  # noqa: E402
    JOEY_START,
    JOEY_TIME,
    ONMT_START,
    ONMT_TIME,
    ct2_result,
    joey_checkpoint,
    joey_throughput,
    onmt_checkpoint,
    onmt_throughput,
    reported_seconds,
)
from tfm.data.text import normalize_text  # noqa: E402
from tfm.decoding.scoring import bleu  # noqa: E402

TORCH = "torch==2.13.0"
ONMT = "OpenNMT-py==3.5.1"
CT2 = "ctranslate2==4.8.5"
JOEY = "joeynmt==2.3.0"
# What OpenNMT-py 3.5.1 imports to build a vocabulary, train and translate (its metadata asks
# for torch<2.3, hence --no-deps): every module of onmt/transforms is imported at start-up, so
# spacy, fasttext, ahocorasick and rapidfuzz are needed too. Left out: flask and waitress (the
# server), tensorboard (only with -tensorboard), six (not imported).
ONMT_DEPS = ["configargparse", "pyonmttok>=1.37,<2", "pyyaml", "sacrebleu", "regex",
             "rapidfuzz", "pyahocorasick", "spacy", "fasttext-wheel", "numpy"]
# JoeyNMT 2.3.0 imports importlib_metadata without declaring it.
JOEY_DEPS = ["importlib_metadata"]

MODEL = {"d_model": 256, "layers": 3, "heads": 4, "ff": 1024, "dropout": 0.1,
         "label_smoothing": 0.1, "adam_betas": [0.9, 0.98], "noam_factor": 0.32,
         "warmup": 400, "batch_tokens": 4096}
SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}
PEER_NAMES = {"onmt": "OpenNMT-py", "ct2": "CTranslate2", "joey": "JoeyNMT"}
MODES = {"greedy": 1, "beam5": 5}


# ---------------------------------------------------------------------------------- setup

def default_venvs() -> Path:
    """Where the peers' environments go unless --venvs says: $TFM_BENCH_VENVS, else the
    per-user cache directory ($XDG_CACHE_HOME/tfm-bench, ~/.cache/tfm-bench by default)."""
    if os.environ.get("TFM_BENCH_VENVS"):
        return Path(os.environ["TFM_BENCH_VENVS"])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "tfm-bench"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed_versions(venv: Path, names: list[str]) -> dict[str, str | None]:
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for n in sys.argv[1:]:\n"
            "    try: out[n] = m.version(n)\n"
            "    except m.PackageNotFoundError: out[n] = None\n"
            "print(json.dumps(out))")
    result = subprocess.run([str(venv_python(venv)), "-c", code, *names], check=True,
                            capture_output=True, text=True)
    return json.loads(result.stdout)


def pip(venv: Path, *args: str) -> None:
    command = [str(venv_python(venv)), "-m", "pip", "install", "-q", *args]
    log("  " + " ".join(command[2:]))
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"pip failed ({result.returncode}): "
                           + "\n".join(result.stderr.splitlines()[-15:]))


def ensure_venv(venv: Path, wanted: dict[str, str], no_deps: list[str], deps: list[str]) -> dict:
    """A virtual environment with torch 2.13.0 first, then the ``wanted`` {distribution:
    requirement} (those in ``no_deps`` without their dependencies), then ``deps``; each step only
    if what it installs is missing or at another version."""
    if not venv_python(venv).exists():
        log(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    constraint = venv / "torch-constraint.txt"
    constraint.write_text(TORCH + "\n")
    names = ["torch", *wanted]
    have = installed_versions(venv, names)
    if not (have["torch"] or "").startswith("2.13.0"):
        pip(venv, TORCH)
    for name, requirement in wanted.items():
        version = requirement.split("==")[1]
        if have.get(name) != version:
            extra = ["--no-deps"] if name in no_deps else []
            pip(venv, "-c", str(constraint), *extra, requirement)
    dep_names = [re.split(r"[<>=!\[]", d)[0] for d in deps]
    have_deps = installed_versions(venv, dep_names)
    missing = [d for d, n in zip(deps, dep_names) if have_deps[n] is None]
    if missing:
        pip(venv, "-c", str(constraint), *missing)
    versions = installed_versions(venv, names)
    if not (versions["torch"] or "").startswith("2.13.0"):
        raise RuntimeError(f"{venv}: torch {versions['torch']} instead of 2.13.0")
    return versions


# Each environment: what ensure_venv installs in it, and the peers that run in it.
ENVIRONMENTS = {
    "onmt": (({"OpenNMT-py": ONMT, "ctranslate2": CT2}, ["OpenNMT-py"], ONMT_DEPS),
             {"onmt", "ct2"}),
    "joey": (({"joeynmt": JOEY}, [], JOEY_DEPS), {"joey"}),
}


def setup(peers: list[str], venvs: Path) -> dict:
    """The environments the ``peers`` need, installed where missing: for each, its path, the
    installed versions and the seconds the check and installs took."""
    out: dict = {}
    venvs.mkdir(parents=True, exist_ok=True)
    for name, (install, users) in ENVIRONMENTS.items():
        if users.isdisjoint(peers):
            continue
        start = time.perf_counter()
        versions = ensure_venv(venvs / name, *install)
        out[name] = {"venv": str(venvs / name), "versions": versions,
                     "seconds": round(time.perf_counter() - start, 1)}
    return out


# ----------------------------------------------------------------------------------- data

def read_gz(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8-sig") as f:
        return [line.rstrip("\r\n") for line in f]


def prepare_data(data: Path, tokenizer_path: Path, work: Path, src: str, tgt: str) -> dict:
    """Pre-tokenized files WORK/data/{train,val,test}.{src,tgt}, a joint vocabulary of the
    training pieces (most frequent first), and the raw test references."""
    from tokenizers import Tokenizer

    out_dir = work / "data"
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = out_dir / "stamp.json"
    key = {"data": str(data.resolve()), "tokenizer": str(tokenizer_path.resolve()),
           "tokenizer_mtime": tokenizer_path.stat().st_mtime,
           "tokenizer_size": tokenizer_path.stat().st_size, "src": src, "tgt": tgt}
    if stamp.exists():
        saved = json.loads(stamp.read_text())
        if saved.get("key") == key:
            return saved["info"]
    tok = Tokenizer.from_file(str(tokenizer_path))
    info: dict = {"dir": str(out_dir), "splits": {}}
    counts: Counter = Counter()
    for name, split in SPLITS.items():
        entry = {}
        for lang in (src, tgt):
            lines = read_gz(data / f"{split}.{lang}.gz")
            texts = [normalize_text(t) for t in lines]
            encodings = tok.encode_batch(texts, add_special_tokens=False)
            rows = [" ".join(e.tokens) for e in encodings]
            if any(not r for r in rows):
                empty = sum(1 for r in rows if not r)
                raise RuntimeError(f"{split}.{lang}: {empty} empty lines after tokenization")
            (out_dir / f"{name}.{lang}").write_text("\n".join(rows) + "\n", encoding="utf-8")
            pieces = sum(len(e.tokens) for e in encodings)
            entry[lang] = {"sentences": len(rows), "pieces": pieces}
            if name == "train":
                for e in encodings:
                    counts.update(e.tokens)
            if name == "test" and lang == tgt:
                (out_dir / f"test.ref.{tgt}").write_text("\n".join(lines) + "\n",
                                                         encoding="utf-8")
        info["splits"][name] = entry
    # Joint vocabulary, frequency then alphabetical order (JoeyNMT's own sort_and_cut order).
    vocab = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    (out_dir / "vocab.txt").write_text("".join(f"{t}\n" for t, _ in vocab), encoding="utf-8")
    info["vocab_pieces"] = len(vocab)
    info["tokenizer_vocab"] = tok.get_vocab_size()
    train = info["splits"]["train"]
    n = train[src]["sentences"]
    info["train_src_tgt_ratio"] = (train[src]["pieces"] + n) / (train[tgt]["pieces"] + n)
    stamp.write_text(json.dumps({"key": key, "info": info}, indent=1))
    return info


NOT_PIECES = {"<s>", "</s>", "<pad>", "<blank>"}  # tfm's and OpenNMT-py's specials


def detokenize(tokenizer_path: Path, hyp_file: Path) -> tuple[list[str], int]:
    """Peer output (pieces joined by spaces) -> text: pieces -> ids (``token_to_id``) -> tfm's
    ``decode`` (special tokens dropped, ends stripped); also the number of output pieces
    (</s>, <s> and padding excluded, <unk> counted)."""
    from tfm.data.tokenizer import decode, load_tokenizer

    tok = load_tokenizer(tokenizer_path)
    texts, pieces = [], 0
    for line in hyp_file.read_text(encoding="utf-8").split("\n")[:-1]:
        tokens = [t for t in line.split() if t not in NOT_PIECES]
        ids = [tok.token_to_id(t) for t in tokens]
        texts.append(decode(tok, [i for i in ids if i is not None]))
        pieces += len(tokens)
    return texts, pieces


def score(tokenizer_path: Path, data_info: dict, hyp_file: Path, tgt: str,
          seconds: float) -> dict:
    refs = (Path(data_info["dir"]) / f"test.ref.{tgt}").read_text(encoding="utf-8")
    refs = refs.split("\n")[:-1]
    texts, pieces = detokenize(tokenizer_path, hyp_file)
    (hyp_file.with_suffix(".detok")).write_text("\n".join(texts) + "\n", encoding="utf-8")
    result = bleu(texts, refs)
    return {"seconds": round(seconds, 3), "sentences": len(texts),
            "sent_per_s": round(len(texts) / seconds, 1),
            "pieces": pieces, "pieces_per_s": round(pieces / seconds, 1),
            "bleu": round(result.score, 2), "signature": result.signature}


# ------------------------------------------------------------------------- processes

def thread_env(threads: int, **extra: str) -> dict:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("VIRTUAL_ENV", None)
    env.update(extra)
    return env


def _hwm_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    """Processes below ``pid`` (from the parent ids in /proc/*/stat)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _default_sigint() -> None:
    """In the child, before it runs: SIGINT back to its default action. A job started in the
    background by a non-interactive shell (``nohup python bench/run.py &``) ignores SIGINT, and
    its children inherit that, so JoeyNMT would never see the SIGINT that makes it save."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Monitored:
    """A command in its own session; its merged stdout/stderr timestamped line by line (seconds
    since launch) into ``log``; peak RSS (VmHWM) of the process and of its descendants."""

    def __init__(self, command: list[str], log_path: Path, env: dict, cwd: Path | None = None):
        self.log_path = log_path
        self.lines: list[tuple[float, str]] = []
        self.hwm_main_kb = 0
        self.hwm_tree_kb: dict[int, int] = {}
        self.stopped_s = 0.0
        self._last_sample = None
        self.start = time.monotonic()
        self._log = log_path.open("w", encoding="utf-8")
        self._log.write("# " + " ".join(command) + "\n")
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=cwd, text=True,
                                     errors="replace", start_new_session=True, bufsize=1,
                                     preexec_fn=_default_sigint)
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            t = time.monotonic() - self.start
            line = line.rstrip("\n")
            with self._lock:
                self.lines.append((t, line))
            self._log.write(f"{t:9.3f} {line}\n")
            self._log.flush()

    def snapshot(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self.lines)

    def sample_memory(self) -> None:
        pid = self.proc.pid
        now = time.monotonic()
        if self._last_sample is not None and process_stopped(pid):
            self.stopped_s += now - self._last_sample
        self._last_sample = now
        self.hwm_main_kb = max(self.hwm_main_kb, _hwm_kb(pid))
        for child in _descendants(pid):
            self.hwm_tree_kb[child] = max(self.hwm_tree_kb.get(child, 0), _hwm_kb(child))

    def stop(self) -> None:
        self.sample_memory()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def finish(self) -> int:
        rc = self.proc.wait()
        self._reader.join(10)
        self._log.close()
        return rc

    @property
    def peak_rss_mb(self) -> float:
        return round(self.hwm_main_kb / 1024, 1)

    @property
    def peak_rss_tree_mb(self) -> float:
        return round((self.hwm_main_kb + sum(self.hwm_tree_kb.values())) / 1024, 1)


def run_training(command: list[str], log_path: Path, env: dict, minutes: float,
                 start_re: re.Pattern, checkpoint_done, startup_limit_s: float = 900,
                 interrupt: bool = False) -> dict:
    """Runs a training command until ``minutes`` after the first line matching
    ``start_re``; then (``interrupt``) sends it SIGINT, on which it saves a checkpoint, or
    lets it run on to its next periodic checkpoint; once a checkpoint is complete
    (``checkpoint_done(lines, after_t)`` returns (step, path, t) or None), stops it."""
    mon = Monitored(command, log_path, env)
    t_start = None
    deadline = mon.start + startup_limit_s
    checkpoint = None
    interrupted = False
    try:
        while True:
            time.sleep(0.5)
            mon.sample_memory()
            lines = mon.snapshot()
            if t_start is None:
                for t, line in lines:
                    if start_re.search(line):
                        t_start = t
                        deadline = mon.start + t_start + minutes * 60
                        break
            if time.monotonic() >= deadline and t_start is None:
                raise RuntimeError(f"training did not start in {startup_limit_s:.0f} s "
                                   f"(see {log_path})")
            if time.monotonic() >= deadline:
                if interrupt and not interrupted:
                    os.kill(mon.proc.pid, signal.SIGINT)
                    interrupted = True
                checkpoint = checkpoint_done(lines, deadline - mon.start)
                if checkpoint is not None:
                    break
                if time.monotonic() > deadline + 600:
                    raise RuntimeError(f"no checkpoint within 10 minutes after the budget "
                                       f"(see {log_path})")
            if mon.proc.poll() is not None:
                break
    finally:
        mon.stop()
        rc = mon.finish()
    lines = mon.lines
    if checkpoint is None:  # the process ended by itself
        tail = "\n".join(line for _, line in lines[-15:])
        if rc:
            raise RuntimeError(f"training failed (rc {rc}), see {log_path}:\n{tail}")
        checkpoint = checkpoint_done(lines, 0.0)
        if checkpoint is None:
            raise RuntimeError(f"training ended without a checkpoint, see {log_path}:\n{tail}")
    step, path, t_ckpt = checkpoint
    return {"lines": lines, "rc": rc, "t_start": t_start, "step": step, "checkpoint": path,
            "t_checkpoint": t_ckpt, "peak_rss_mb": mon.peak_rss_mb,
            "peak_rss_tree_mb": mon.peak_rss_tree_mb, "wall_s": lines[-1][0] if lines else 0,
            "stopped_s": round(mon.stopped_s, 1)}


def yaml_dump(obj, indent: int = 0) -> str:
    """Enough YAML for these configs: block mappings, flow lists of scalars, and floats always
    written with a dot (PyYAML reads ``1e-09`` as a string)."""
    def scalar(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if v is None:
            return "null"
        if isinstance(v, float):
            text = repr(v)
            if "e" in text and "." not in text.split("e")[0]:
                mantissa, exponent = text.split("e")
                text = f"{mantissa}.0e{exponent}"
            return text
        if isinstance(v, int):
            return str(v)
        return json.dumps(str(v), ensure_ascii=False)

    lines = []
    for key, value in obj.items():
        pad = " " * indent
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            lines.append(yaml_dump(value, indent + 2).rstrip("\n"))
        elif isinstance(value, (list, tuple)):
            lines.append(f"{pad}{key}: [{', '.join(scalar(v) for v in value)}]")
        else:
            lines.append(f"{pad}{key}: {scalar(value)}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ PyTorch peers, shared

def training_figures(run: dict) -> dict:
    """What ``run_training`` measured, as every PyTorch peer reports it."""
    return {"steps": run["step"], "checkpoint": run["checkpoint"],
            "startup_s": round(run["t_start"], 1),
            "train_s": round(run["t_checkpoint"] - run["t_start"], 1),
            "peak_rss_mb": run["peak_rss_mb"], "peak_rss_tree_mb": run["peak_rss_tree_mb"],
            "stopped_s": run["stopped_s"]}


@dataclass
class Invocation:
    """A peer's translate command for one file: the command line, and the files its standard
    input and output are bound to (None: the command names its files itself)."""

    command: list[str]
    stdin: Path | None = None
    stdout: Path | None = None


def decode_test_set(args, data_info: dict, out_dir: Path, env: dict,
                    invocation: Callable[[int, Path, Path], Invocation],
                    own_time: re.Pattern, timing: str, batch: str) -> dict:
    """Decode the test set in each mode (greedy, beam 5) with a peer's translate command
    (``invocation(beam, source file, hypothesis file)``), and score it. The seconds are the
    toolkit's own timing of its decoding loop (``own_time`` in its log); where it reports none,
    the wall time minus that of the same command on a 1-line input (start-up and model load)."""
    data_dir = Path(data_info["dir"])
    test = data_dir / f"test.{args.src}"
    one = out_dir / "one.src"
    one.write_text(test.read_text(encoding="utf-8").split("\n")[0] + "\n", encoding="utf-8")
    results = {}
    for mode, beam in MODES.items():
        hyp = out_dir / f"test.{mode}.hyp"
        runs = {}
        for name, src, out in (("one", one, out_dir / f"one.{mode}.hyp"), ("test", test, hyp)):
            how = invocation(beam, src, out)
            log_path = out_dir / (f"translate.one.{mode}.log" if name == "one"
                                  else f"translate.{mode}.log")
            runs[name] = run_measured(how.command, log_path=log_path, stdin=how.stdin,
                                      stdout=how.stdout, env=env)
        full, base = runs["test"], runs["one"]
        own = reported_seconds(full.output, own_time)
        results[mode] = score(args.tokenizer, data_info, hyp, args.tgt,
                              own if own is not None else full.seconds - base.seconds)
        results[mode].update({"timing": timing if own is not None else "wall - 1-line wall",
                              "wall_s": round(full.seconds, 2),
                              "wall_minus_1line_s": round(full.seconds - base.seconds, 2),
                              "stopped_s": round(full.stopped_s + base.stopped_s, 1),
                              "peak_rss_mb": round(full.peak_rss_mb, 1), "batch": batch})
    return results


# -------------------------------------------------------------------------- OpenNMT-py

def onmt_config(work: Path, data_dir: Path, src: str, tgt: str, save_every: int) -> dict:
    m = MODEL
    return {
        "save_data": str(work / "onmt" / "samples"),
        "src_vocab": str(work / "onmt" / "vocab.shared"),
        "tgt_vocab": str(work / "onmt" / "vocab.shared"),
        "share_vocab": True,
        "overwrite": True,
        "data": {"corpus_1": {"path_src": str(data_dir / f"train.{src}"),
                              "path_tgt": str(data_dir / f"train.{tgt}")}},
        "save_model": str(work / "onmt" / "model"),
        "save_checkpoint_steps": save_every,
        "keep_checkpoint": 3,
        "seed": 1234,
        "train_steps": 10_000_000,
        "valid_steps": 10_000_000,
        "report_every": 1,
        "model_dtype": "fp32",
        "encoder_type": "transformer",
        "decoder_type": "transformer",
        "enc_layers": m["layers"],
        "dec_layers": m["layers"],
        "hidden_size": m["d_model"],
        "word_vec_size": m["d_model"],
        "transformer_ff": m["ff"],
        "heads": m["heads"],
        "dropout": [m["dropout"]],
        "attention_dropout": [m["dropout"]],
        "position_encoding": True,
        "share_embeddings": True,
        "share_decoder_embeddings": True,
        "label_smoothing": m["label_smoothing"],
        "optim": "adam",
        "adam_beta1": m["adam_betas"][0],
        "adam_beta2": m["adam_betas"][1],
        "decay_method": "noam",
        "learning_rate": m["noam_factor"],
        "warmup_steps": m["warmup"],
        "max_grad_norm": 0.0,
        "param_init": 0.0,
        "param_init_glorot": True,
        "batch_size": m["batch_tokens"],
        "batch_type": "tokens",
        "normalization": "tokens",
        "accum_count": [1],
        "world_size": 1,
        "gpu_ranks": [],
    }


def train_onmt(args, venv: Path, data_info: dict) -> dict:
    out_dir = args.work / "onmt"
    out_dir.mkdir(parents=True, exist_ok=True)
    data_dir = Path(data_info["dir"])
    config = onmt_config(args.work, data_dir, args.src, args.tgt, save_every=20)
    config_path = out_dir / "train.yaml"
    config_path.write_text(yaml_dump(config))
    env = thread_env(args.threads, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    bin_dir = venv / "bin"
    vocab = run_measured([str(bin_dir / "onmt_build_vocab"), "-config", str(config_path),
                          "-n_sample", "-1"], log_path=out_dir / "build_vocab.log", env=env)
    vocab_size = sum(1 for _ in (out_dir / "vocab.shared").open(encoding="utf-8"))
    for old in out_dir.glob("model_step_*.pt"):
        old.unlink()
    start = time.perf_counter()
    run = run_training([str(bin_dir / "onmt_train"), "-config", str(config_path)],
                       out_dir / "train.log", env, args.train_minutes, ONMT_START,
                       onmt_checkpoint)
    train_wall = time.perf_counter() - start
    result = {"vocab_entries_file": vocab_size, "config": str(config_path),
              **training_figures(run), **onmt_throughput(run["lines"])}
    return {"train": result, "phases": {"vocab": round(vocab.seconds, 1),
                                        "train": round(train_wall, 1)}}


def decode_onmt(args, venv: Path, data_info: dict, checkpoint: str) -> dict:
    cap = ["-max_length", str(args.max_length)] if args.max_length else []

    def invocation(beam: int, src: Path, hyp: Path) -> Invocation:
        return Invocation([str(venv / "bin" / "onmt_translate"), "-model", checkpoint,
                           "-src", str(src), "-output", str(hyp), "-beam_size", str(beam),
                           "-batch_size", "30", "-batch_type", "sents", "-gpu", "-1",
                           "-report_time", *cap])

    return decode_test_set(args, data_info, args.work / "onmt",
                           thread_env(args.threads, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1"),
                           invocation, ONMT_TIME, "onmt -report_time", "30 sentences")


# ------------------------------------------------------------------------- CTranslate2

CT2_CONVERT = r"""
import sys, torch
import ctranslate2.converters as c
src, dst, out = sys.argv[1:4]
ckpt = torch.load(src, map_location="cpu", weights_only=False)
before = getattr(ckpt["opt"], "self_attn_type", None)
ckpt["opt"].self_attn_type = "scaled-dot"
torch.save(ckpt, dst)
print("self_attn_type", before, "-> scaled-dot")
c.OpenNMTPyConverter(dst, unsafe_deserialization=True).convert(out, force=True)
"""

CT2_TRANSLATE = r"""
import json, resource, sys, time
import ctranslate2
model, src, prefix, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cap = {"max_decoding_length": int(sys.argv[5])} if int(sys.argv[5]) else {}
batch = [l.split() for l in open(src, encoding="utf-8").read().split("\n")[:-1]]
t0 = time.perf_counter()
tr = ctranslate2.Translator(model, device="cpu", compute_type="float32",
                            intra_threads=threads, inter_threads=1)
load_s = time.perf_counter() - t0
out = {"load_s": load_s}
for mode, beam in (("greedy", 1), ("beam5", 5)):
    tr.translate_batch(batch[:1], beam_size=beam, **cap)  # warm-up
    t0 = time.perf_counter()
    res = tr.translate_batch(batch, beam_size=beam, max_batch_size=2048, batch_type="tokens",
                             **cap)
    out[mode] = time.perf_counter() - t0
    with open(f"{prefix}.{mode}.hyp", "w", encoding="utf-8") as f:
        for r in res:
            f.write(" ".join(r.hypotheses[0]) + "\n")
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT " + json.dumps(out))
"""


def run_ct2(args, venv: Path, data_info: dict, checkpoint: str) -> dict:
    out_dir = args.work / "ct2"
    out_dir.mkdir(parents=True, exist_ok=True)
    env = thread_env(args.threads, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    python = str(venv_python(venv))
    model_dir = out_dir / "model"
    convert = run_measured([python, "-c", CT2_CONVERT, checkpoint,
                            str(out_dir / "onmt-scaled-dot.pt"), str(model_dir)],
                           log_path=out_dir / "convert.log", env=env)
    (out_dir / "onmt-scaled-dot.pt").unlink()
    data_dir = Path(data_info["dir"])
    longest = max(len(line.split()) for line in
                  (data_dir / f"test.{args.src}").read_text(encoding="utf-8").splitlines())
    ct2_cap = int(1.5 * (longest + 1) + 10)  # tfm's cap for that sentence (source + </s>)
    translate = run_measured([python, "-c", CT2_TRANSLATE, str(model_dir),
                              str(data_dir / f"test.{args.src}"), str(out_dir / "test"),
                              str(args.threads), str(args.max_length or ct2_cap)],
                             log_path=out_dir / "translate.log", env=env)
    timing = ct2_result(translate.output)
    decode = {}
    for mode in MODES:
        decode[mode] = score(args.tokenizer, data_info, out_dir / f"test.{mode}.hyp", args.tgt,
                             timing[mode])
        decode[mode].update({"timing": "in-process around translate_batch",
                             "batch": "2048 tokens", "compute_type": "float32",
                             "stopped_s": round(translate.stopped_s, 1)})
    return {"converted_from": checkpoint, "model_load_s": round(timing["load_s"], 3),
            "decode_peak_rss_mb": round(timing["peak_rss_mb"], 1), "decode": decode,
            "phases": {"convert": round(convert.seconds, 1),
                       "decode": round(translate.seconds, 1)}}


# ----------------------------------------------------------------------------- JoeyNMT

def joey_config(args, data_info: dict, model_dir: Path, beam: int = 1,
                checkpoint: str | None = None) -> dict:
    m = MODEL
    data_dir = Path(data_info["dir"])
    side = {"level": "word", "lowercase": False, "normalize": False, "max_length": -1,
            "voc_file": str(data_dir / "vocab.txt")}
    layer = {"type": "transformer", "num_layers": m["layers"], "num_heads": m["heads"],
             "embeddings": {"embedding_dim": m["d_model"], "scale": True},
             "hidden_size": m["d_model"], "ff_size": m["ff"], "dropout": m["dropout"],
             "layer_norm": "pre"}
    testing = {"beam_size": beam, "batch_size": 64, "batch_type": "sentence", "eval_metrics": []}
    if getattr(args, "max_length", None):
        testing["max_output_length"] = args.max_length
    if checkpoint:
        testing["load_model"] = checkpoint
    return {
        "name": "peers-joey",
        "joeynmt_version": "2.3.0",
        "model_dir": str(model_dir),
        "use_cuda": False,
        "fp16": False,
        "random_seed": 42,
        "data": {"train": str(data_dir / "train"), "dev": str(data_dir / "val"),
                 "dataset_type": "plain", "sample_dev_subset": 16,
                 "src": {"lang": args.src, **side}, "trg": {"lang": args.tgt, **side}},
        "testing": testing,
        "training": {
            "optimizer": "adam", "adam_betas": m["adam_betas"], "scheduling": "noam",
            "learning_rate_factor": m["noam_factor"], "learning_rate_warmup": m["warmup"],
            "learning_rate_min": 1.0e-9, "loss": "crossentropy",
            "label_smoothing": m["label_smoothing"], "batch_size": m["batch_tokens"],
            "batch_type": "token", "normalization": "tokens", "epochs": 1000,
            "validation_freq": 10_000_000, "logging_freq": 1,  # no validation
            "early_stopping_metric": "loss", "keep_best_ckpts": -1, "overwrite": True,
            "shuffle": True, "print_valid_sents": [], "num_workers": 0,
        },
        "model": {"initializer": "xavier_uniform", "embed_initializer": "xavier_uniform",
                  "bias_initializer": "zeros", "tied_embeddings": True,
                  "tied_softmax": True, "encoder": layer, "decoder": dict(layer)},
    }


def train_joey(args, venv: Path, data_info: dict) -> dict:
    out_dir = args.work / "joey"
    out_dir.mkdir(parents=True, exist_ok=True)
    model_dir = out_dir / "model"
    config_path = out_dir / "train.yaml"
    config_path.write_text(yaml_dump(joey_config(args, data_info, model_dir)))
    env = thread_env(args.threads)

    start = time.perf_counter()
    run = run_training([str(venv_python(venv)), "-m", "joeynmt", "train", str(config_path),
                        "--skip-test"], out_dir / "train.log", env, args.train_minutes,
                       JOEY_START, joey_checkpoint, interrupt=True)
    train_wall = time.perf_counter() - start
    result = {"config": str(config_path), **training_figures(run),
              "validation": "none (stopped with SIGINT, on which JoeyNMT saves a checkpoint)",
              **joey_throughput(run["lines"], data_info["train_src_tgt_ratio"])}
    return {"train": result, "phases": {"train": round(train_wall, 1)}}


def decode_joey(args, venv: Path, data_info: dict, checkpoint: str) -> dict:
    out_dir = args.work / "joey"

    def invocation(beam: int, src: Path, hyp: Path) -> Invocation:
        config_path = out_dir / f"translate.beam{beam}.yaml"
        config_path.write_text(yaml_dump(joey_config(args, data_info, out_dir / "model",
                                                     beam=beam, checkpoint=checkpoint)))
        return Invocation([str(venv_python(venv)), "-m", "joeynmt", "translate",
                           str(config_path)], stdin=src, stdout=hyp)

    env = thread_env(args.threads, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")  # our own checkpoint
    return decode_test_set(args, data_info, out_dir, env, invocation, JOEY_TIME,
                           "joeynmt 'Generation took'", "64 sentences")


# -------------------------------------------------------------------------------- main

def table(results: dict) -> str:
    rows = [("peer", "train tok/s", "steps", "train s", "peak RSS MB", "mode", "sent/s",
             "pieces/s", "BLEU")]
    for key, peer in results["peers"].items():
        name = PEER_NAMES.get(key, key)
        if "error" in peer:
            rows.append((name, "error: " + peer["error"].splitlines()[0][:60], "", "", "", "",
                         "", "", ""))
            continue
        train = peer.get("train", {})
        first = True
        for mode, d in peer.get("decode", {}).items():
            rows.append((name if first else "",
                         f"{train['tokens_per_s']:,.0f}" if first and train.get(
                             "tokens_per_s") else "",
                         str(train.get("steps", "")) if first else "",
                         str(train.get("train_s", "")) if first else "",
                         f"{train['peak_rss_mb']:,.0f}" if first and train else "",
                         mode, f"{d['sent_per_s']:,.1f}", f"{d['pieces_per_s']:,.0f}",
                         f"{d['bleu']:.2f}"))
            first = False
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i in (0, 5) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))) for r in rows)


@contextmanager
def failure_recorded(peer: dict, name: str) -> Iterator[None]:
    """A failure of what runs inside is recorded in ``peer["error"]``, not raised: one peer
    failing must not stop the others."""
    try:
        yield
    except Exception as error:  # noqa: BLE001
        peer["error"] = f"{type(error).__name__}: {error}"
        log(f"{name} failed: " + peer["error"])


def train_and_decode(args, key: str, installed: dict, data_info: dict, train, decode) -> dict:
    """One PyTorch peer: train (or, with --reuse, read back the training of a previous run in
    --work), then decode with that checkpoint."""
    name = PEER_NAMES[key]
    venv = Path(installed["venv"])
    peer = {"versions": installed["versions"], "phases": {"install": installed["seconds"]}}
    state_file = args.work / key / "result.json"
    with failure_recorded(peer, name):
        if args.reuse and state_file.exists():
            peer["train"] = json.loads(state_file.read_text())["train"]
        else:
            log(f"{name}: training")
            trained = train(args, venv, data_info)
            peer["train"] = trained["train"]
            peer["phases"].update(trained["phases"])
            state_file.write_text(json.dumps({"train": peer["train"]}, indent=1))
        log(f"{name}: decoding")
        start = time.perf_counter()
        peer["decode"] = decode(args, venv, data_info, peer["train"]["checkpoint"])
        peer["phases"]["decode"] = round(time.perf_counter() - start, 1)
    return peer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_options(parser)
    parser.add_argument("--tokenizer", type=Path, required=True,
                        help="tokenizer JSON from tfm train-tokenizer (joint vocabulary)")
    parser.add_argument("--work", type=Path, required=True, help="work directory")
    parser.add_argument("--peers", default="onmt,ct2,joey",
                        help="comma-separated: onmt, ct2 (needs an OpenNMT-py model), joey")
    parser.add_argument("--train-minutes", type=float, default=10.0,
                        help="training budget per peer, from its first step")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=0,
                        help="cap every peer's outputs at this many pieces (default: each "
                             "peer's own cap); for short debug runs whose models never stop")
    parser.add_argument("--venvs", type=Path, default=default_venvs(),
                        help="where the peers' virtual environments go (default: "
                             "$TFM_BENCH_VENVS, else $XDG_CACHE_HOME/tfm-bench, else "
                             "~/.cache/tfm-bench; now %(default)s)")
    parser.add_argument("--reuse", action="store_true",
                        help="decode the models of a previous run in --work instead of training")
    parser.add_argument("--setup-only", action="store_true",
                        help="install the peers' environments, print their versions, stop")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so that a running toolkit's process group is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = set(peers) - set(PEER_NAMES)
    if unknown:
        parser.error(f"unknown peers: {', '.join(sorted(unknown))}")
    args.work = args.work.resolve()
    args.tokenizer = args.tokenizer.resolve()
    args.work.mkdir(parents=True, exist_ok=True)

    machine = {**describe(measure_peak=False), "threads": args.threads,
               "loadavg_at_start": os.getloadavg()}
    results: dict = {"machine": machine, "model": MODEL,
                     "train_minutes": args.train_minutes,
                     "max_length": args.max_length or "each peer's default", "peers": {}}
    log("setup")
    installed = setup(peers, args.venvs)
    if args.setup_only:
        print(json.dumps(installed, indent=2))
        return
    log("data")
    start = time.perf_counter()
    data_info = prepare_data(args.data, args.tokenizer, args.work, args.src, args.tgt)
    results["data"] = {**data_info, "seconds": round(time.perf_counter() - start, 1),
                       "tokenizer": str(args.tokenizer)}

    onmt_model = None  # the OpenNMT-py checkpoint CTranslate2 converts
    if "onmt" in peers:
        peer = results["peers"]["onmt"] = train_and_decode(
            args, "onmt", installed["onmt"], data_info, train_onmt, decode_onmt)
        onmt_model = peer.get("train", {}).get("checkpoint")
    if "ct2" in peers:
        peer = {"versions": installed["onmt"]["versions"]}
        results["peers"]["ct2"] = peer
        with failure_recorded(peer, PEER_NAMES["ct2"]):
            onmt_state = args.work / "onmt" / "result.json"  # a previous run's, without onmt
            if onmt_model is None and onmt_state.exists():
                onmt_model = json.loads(onmt_state.read_text())["train"]["checkpoint"]
            if onmt_model is None or not Path(onmt_model).exists():
                raise RuntimeError("no OpenNMT-py checkpoint to convert (run with onmt)")
            log("CTranslate2: conversion and decoding")
            peer.update(run_ct2(args, Path(installed["onmt"]["venv"]), data_info, onmt_model))
    if "joey" in peers:
        results["peers"]["joey"] = train_and_decode(
            args, "joey", installed["joey"], data_info, train_joey, decode_joey)

    print(f"\n{machine['cpu']}, {args.threads} threads; Multi30k {args.src}->{args.tgt}, "
          f"test_2016_flickr; training budget {args.train_minutes:g} min per peer")
    print(table(results))
    signatures = {d["signature"] for p in results["peers"].values()
                  for d in p.get("decode", {}).values()}
    for signature in sorted(signatures):
        print(f"BLEU signature: {signature}")
    for key, peer in results["peers"].items():
        parts = [("train", peer.get("train", {}))] + list(peer.get("decode", {}).items())
        for part, d in parts:
            if d.get("stopped_s"):
                print(f"WARNING: {PEER_NAMES[key]} {part}: the process was seen stopped "
                      f"(SIGSTOP) for {d['stopped_s']} s: its timings are not valid")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
