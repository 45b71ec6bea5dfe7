"""Back-translation: sampled search (seeded, the same in any batch), `tfm backtranslate`
(resumable, sharded over torchrun), and synthetic pairs in `tfm prepare` (tagged, upsampled
beside the real ones, never validated on)."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import forked
import pytest
import torch
from conftest import HANG, PAIRS, kill_session, random_model_dir, tfm, write_corpus, write_lines

from tfm.config import BacktranslateConfig, SearchOptions
from tfm.data.corpus import CorpusSpec
from tfm.data.directions import corpora_from_config
from tfm.data.prepare import prepare
from tfm.data.tokenizer import load_vocabularies, save_tokenizer
from tfm.decoding import steps
from tfm.decoding.backtranslation import backtranslate, noised, output_paths, share
from tfm.decoding.engines import load_translator

GERMAN = [t for _, t in PAIRS]


@pytest.fixture(scope="module")
def reverse_model(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    """An untrained de -> en model of the tiny tokenizer (its outputs are noise, but they are
    the outputs whose reproducibility is specified here)."""
    return random_model_dir(tmp_path_factory.mktemp("rev") / "model", tokenizer, seed=1,
                            src="de", tgt="en")


@pytest.fixture(scope="module")
def translator(reverse_model: Path):
    return load_translator(reverse_model, "cpu", workers=1)


def sampled(translator, sentences: list[str], seed: int, topk: int = 0,
            batch_tokens: int = 4096) -> list[str]:
    options = translator.default_options(beam=1, sampling_topk=topk, sampling_seed=seed,
                                         batch_tokens=batch_tokens)
    return [t.text for t in translator.translate(sentences, options)]


# --- sampling ---------------------------------------------------------------------------------

def test_sampling_is_seeded_and_the_same_in_any_batch(translator) -> None:
    first = sampled(translator, GERMAN[:12], seed=5)
    assert sampled(translator, GERMAN[:12], seed=5) == first
    # each sentence alone, or in the other order in small batches: the same draws
    assert [sampled(translator, [s], seed=5)[0] for s in GERMAN[:4]] == first[:4]
    assert sampled(translator, GERMAN[:12][::-1], seed=5, batch_tokens=40) == first[::-1]
    assert sampled(translator, GERMAN[:12], seed=6) != first
    greedy = [t.text for t in translator.translate(
        GERMAN[:12], translator.default_options(beam=1))]
    assert first != greedy


def test_top_k_sampling_draws_only_among_the_k_most_probable_tokens() -> None:
    torch.manual_seed(0)
    logp = torch.log_softmax(torch.randn(6, 50), dim=-1)
    step = steps.Step(0, 0, torch.full((6,), 10), sampling_topk=3)
    masked = steps.sampling_top_k(logp.clone(), step)
    top3 = logp.topk(3, dim=-1).indices
    drawn = set()
    generators = steps.sentence_generators(torch.arange(6)[:, None] + 4, 0, seed=1)
    for _ in range(40):
        chosen_logp, token, _ = steps.sampled_choice(masked, generators, 1.0)
        assert all(t in row for t, row in zip(token.tolist(), top3.tolist()))
        assert torch.equal(chosen_logp, logp.gather(-1, token[:, None])[:, 0])
        drawn.update(token.tolist())
    assert len(drawn) > 6  # it draws, not always the best


def test_sampling_needs_greedy_search_and_a_positive_temperature() -> None:
    from tfm.errors import UsageError

    with pytest.raises(UsageError, match="--beam 1"):
        SearchOptions(beam=4, sampling_topk=0)
    with pytest.raises(UsageError, match="--sampling-temp"):
        SearchOptions(beam=1, sampling_topk=0, sampling_temp=0)
    with pytest.raises(UsageError, match="changes only sampling"):
        SearchOptions(beam=1, sampling_temp=0.7)


# --- the noise and the shares -------------------------------------------------------------------

def test_the_noise_deletes_blanks_and_moves_words_at_most_swap_positions() -> None:
    import random

    words = [f"w{i}" for i in range(200)]
    config = BacktranslateConfig(noise=True)
    out = noised(words, config, random.Random(3))
    assert noised(words, config, random.Random(3)) == out
    blanks = out.count("<unk>")
    assert 0.05 < (len(words) - len(out)) / len(words) < 0.16  # ~0.1 deleted
    assert 0.05 < blanks / len(words) < 0.16  # ~0.1 replaced
    kept = [w for w in out if w != "<unk>"]
    assert kept != sorted(kept, key=lambda w: int(w[1:]))  # shuffled
    only_swap = noised(words, BacktranslateConfig(noise=True, noise_delete=0,
                                                  noise_replace=0), random.Random(3))
    assert sorted(only_swap) == sorted(words)
    assert all(abs(only_swap.index(w) - i) <= 3 for i, w in enumerate(words))


def test_shares_cover_every_line_once_in_order() -> None:
    for total in (0, 1, 7, 20):
        for world in (1, 2, 3):
            lines = [i for r in range(world) for i in share(total, r, world)]
            assert lines == list(range(total))


# --- tfm backtranslate ------------------------------------------------------------------------

def run_bt(translator, lines, prefix: Path, **config) -> object:
    options = translator.default_options(beam=1, sampling_topk=0, sampling_seed=2)
    return backtranslate(translator, lines, prefix, "de", "en", options,
                         BacktranslateConfig(**config), identity="test")


def corpus_bytes(prefix: Path) -> tuple[bytes, bytes]:
    src, tgt, _ = output_paths(prefix, "en", "de")
    return src.read_bytes(), tgt.read_bytes()


def test_a_resumed_backtranslation_equals_an_uninterrupted_one(translator, tmp_path) -> None:
    whole = run_bt(translator, GERMAN, tmp_path / "whole", chunk=7, noise=True)
    assert whole.written == len(GERMAN) and whole.translated == len(GERMAN)

    class Killed(Exception):
        pass

    done = []

    def kill_in_third_chunk(n: int) -> None:
        done.append(n)
        if sum(done) > 14:
            raise Killed

    options = translator.default_options(beam=1, sampling_topk=0, sampling_seed=2,
                                         batch_tokens=30)
    with pytest.raises(Killed):
        backtranslate(translator, GERMAN, tmp_path / "again", "de", "en", options,
                      BacktranslateConfig(chunk=7, noise=True), identity="test",
                      progress=kill_in_third_chunk)
    assert not output_paths(tmp_path / "again", "en", "de")[0].exists()  # nothing half-written
    resumed = run_bt(translator, GERMAN, tmp_path / "again", chunk=7, noise=True)
    assert resumed.reused == 14 and resumed.translated == len(GERMAN) - 14
    assert corpus_bytes(tmp_path / "again") == corpus_bytes(tmp_path / "whole")
    assert not (tmp_path / "again.work").exists()
    # Run again once finished: nothing to translate; asked otherwise: translated anew.
    assert run_bt(translator, GERMAN, tmp_path / "again", chunk=7, noise=True).translated == 0
    assert run_bt(translator, GERMAN, tmp_path / "again", chunk=7, noise=True,
                  noise_seed=9).translated == len(GERMAN)
    assert corpus_bytes(tmp_path / "again") != corpus_bytes(tmp_path / "whole")


def test_the_filters_drop_pairs_by_length_ratio_and_score(translator, tmp_path) -> None:
    every = run_bt(translator, GERMAN, tmp_path / "all")
    strict = run_bt(translator, GERMAN, tmp_path / "some", max_ratio=1.5)
    assert strict.dropped["length ratio"] > 0
    assert strict.written == every.written - strict.dropped["length ratio"]
    scored = run_bt(translator, GERMAN, tmp_path / "scored", min_score=-5.0)
    assert scored.dropped["score"] + scored.written == every.written


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def bt_cli(reverse: Path, mono: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return tfm("backtranslate", "-i", str(mono), "--reverse-model", str(reverse),
               "--lang", "de", "--into", "en", "-o", str(out), "--device", "cpu", *extra)


def test_the_command_writes_a_corpus_prepare_reads(reverse_model, tokenizer_path,
                                                   tmp_path) -> None:
    mono = write_lines(tmp_path / "mono.de", GERMAN[:10])
    result = bt_cli(reverse_model, mono, tmp_path / "synth", "--beam", "2", "--noise")
    assert result.returncode == 0, result.stderr
    assert "Wrote 10 pairs" in result.stderr
    src, tgt, report = output_paths(tmp_path / "synth", "en", "de")
    assert tgt.read_text().splitlines() == GERMAN[:10] and report.exists()
    assert len(src.read_text().splitlines()) == 10
    report = prepare(CorpusSpec((str(tmp_path / "synth"),), "en", "de"), tokenizer_path,
                     tmp_path / "data")
    assert report.splits["train"].read == 10


FRENCH = ["Un chien court dans le parc .", "La femme achète des légumes au marché .",
          "Les enfants jouent dans le jardin avec leur chat .", "Il lit le journal ce matin .",
          "Deux hommes marchent le long de la rivière .", "Une fille mange une pomme rouge .",
          "Le soleil brille sur les montagnes .", "Nous allons à la plage demain .",
          "Elle porte une grande robe bleue .", "Le garçon nage dans le lac .",
          "Les oiseaux chantent dans les arbres .", "Mon frère travaille à la boulangerie ."]


@pytest.mark.parametrize("case", ["wrong language", "text of another language",
                                  "wrong direction", "wrong tokenizer", "empty file",
                                  "binary file", "blank file"])
def test_bad_input_is_one_line_and_nothing_is_written(case, reverse_model, tokenizer,
                                                      tmp_path) -> None:
    from tfm.data.tokenizer import train_tokenizer

    mono = write_lines(tmp_path / "mono.de", GERMAN[:5])
    model, extra = reverse_model, []
    if case == "wrong language":
        extra = ["--lang", "fr"]
    elif case == "text of another language":  # (where the langid extra can tell)
        pytest.importorskip("py3langid")
        write_lines(mono, FRENCH)
    elif case == "wrong direction":
        model = random_model_dir(tmp_path / "fwd", tokenizer, src="en", tgt="de")
    elif case == "wrong tokenizer":
        other = train_tokenizer(["Ein ganz anderer Text .", "Noch einer ."], vocab_size=280)
        save_tokenizer(other, tmp_path / "other.json")
        extra = ["--tokenizer", str(tmp_path / "other.json")]
    elif case == "empty file":
        mono.write_bytes(b"")
    elif case == "binary file":
        mono.write_bytes(b"\x00\x01\x02 PK\x03\x04\n\x00\x00\n")
    elif case == "blank file":
        mono.write_text("\n  \n\n")
    line = one_line_error(bt_cli(model, mono, tmp_path / "synth", *extra))
    assert any(word in line for word in ("mono.de", "--reverse-model", "--tokenizer"))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("synth")) == []


# --- synthetic pairs in tfm prepare -------------------------------------------------------------

def mixed_corpora(tmp_path: Path, synthetic: dict | None = None, real: dict | None = None):
    write_corpus(tmp_path / "c", PAIRS[:10], "real")
    write_corpus(tmp_path / "c", PAIRS[10:15], "val")
    # synthetic sources: recognisably not the real ones
    write_corpus(tmp_path / "c", [(f"synthetic {s}", t) for s, t in PAIRS[15:30]], "synth")
    entries = [{"train": str(tmp_path / "c" / "real"), "valid": str(tmp_path / "c" / "val"),
                "src_lang": "en", "tgt_lang": "de", **(real or {})}]
    if synthetic is not None:
        entries.append({"train": str(tmp_path / "c" / "synth"), "src_lang": "en",
                        "tgt_lang": "de", "synthetic": True, **synthetic})
    return corpora_from_config(entries)


def rows(data: Path, split: str) -> list[dict]:
    import datasets

    return list(datasets.load_from_disk(str(data))[split])


def test_the_tag_reaches_the_model_only_for_synthetic_pairs(tokenizer_path, tmp_path) -> None:
    prepare(mixed_corpora(tmp_path, {}), tokenizer_path, tmp_path / "data",
            synthetic_tag="<BT>")
    vocab = load_vocabularies(tmp_path / "data" / "tokenizer.json").src
    bt = vocab.token_to_id("<BT>")
    assert bt is not None and load_vocabularies(tokenizer_path).src.token_to_id("<BT>") is None
    train = rows(tmp_path / "data", "train")
    assert len(train) == 25
    for row in train:
        is_synthetic = "synthetic" in vocab.decode([i for i in row["src_ids"] if i != bt])
        assert row["src_ids"].count(bt) == is_synthetic  # once, first, or never
        assert (row["src_ids"][0] == bt) == is_synthetic
    assert all(bt not in row["src_ids"] for row in rows(tmp_path / "data", "valid"))


def test_validation_never_sees_synthetic_pairs(tokenizer_path, tmp_path) -> None:
    prepare(mixed_corpora(tmp_path, {}), tokenizer_path, tmp_path / "data")
    assert [r["src_text"] for r in rows(tmp_path / "data", "valid")] == \
        [s for s, _ in PAIRS[10:15]]
    from tfm.errors import UsageError

    with pytest.raises(UsageError, match="validation is on real pairs only"):
        mixed_corpora(tmp_path, {"valid": str(tmp_path / "c" / "val")})


def test_upsample_writes_the_real_pairs_n_times(tokenizer_path, tmp_path) -> None:
    prepare(mixed_corpora(tmp_path, {}, {"upsample": 3}), tokenizer_path, tmp_path / "data")
    train = rows(tmp_path / "data", "train")
    real = [r["src_ids"] for r in train[:30]]
    assert len(train) == 3 * 10 + 15 and real[:10] == real[10:20] == real[20:30]
    assert len(rows(tmp_path / "data", "valid")) == 5  # validation: once


def dataset_digest(data: Path) -> dict[str, str]:
    return {str(p.relative_to(data)): hashlib.sha256(p.read_bytes()).hexdigest()
            # (state.json holds a fingerprint that datasets draws at random)
            for p in sorted(data.rglob("*")) if p.is_file() and p.name != "state.json"}


def test_a_run_without_synthetic_corpora_prepares_what_it_did_before(tokenizer_path,
                                                                        tmp_path) -> None:
    # The keys at their defaults change nothing: the same files, byte for byte, the same
    # fingerprint, and the tokenizer as given (no tag added).
    write_corpus(tmp_path / "corpus", PAIRS)
    train = str(tmp_path / "corpus" / "train")
    plain = corpora_from_config([{"train": train, "src_lang": "en", "tgt_lang": "de"}])
    defaults = corpora_from_config([{"train": train, "src_lang": "en", "tgt_lang": "de",
                                     "synthetic": False, "upsample": 1}])
    bilingual = CorpusSpec((train,), "en", "de")
    for name, corpora in (("a", plain), ("b", defaults), ("c", bilingual)):
        prepare(corpora, tokenizer_path, tmp_path / name)
    assert dataset_digest(tmp_path / "a") == dataset_digest(tmp_path / "b") \
        == dataset_digest(tmp_path / "c")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == tokenizer_path.read_bytes()


def test_a_tag_that_is_a_vocabulary_entry_is_refused_in_one_line(tokenizer, tokenizer_path,
                                                                  tmp_path) -> None:
    word = next(t for t in sorted(tokenizer.get_vocab()) if t.isalpha() and len(t) > 2)
    mixed_corpora(tmp_path, {})  # the files
    config = tmp_path / "run.yaml"
    config.write_text(
        f"corpora:\n  - train: {tmp_path / 'c' / 'real'}\n    src_lang: en\n    tgt_lang: de\n"
        f"  - train: {tmp_path / 'c' / 'synth'}\n    src_lang: en\n    tgt_lang: de\n"
        "    synthetic: true\n")
    for tag, says in ((word, "vocabulary entry"), ("<s>", "reserved"), (">>de<<", "reserved"),
                      ("<B T>", "without spaces")):
        result = tfm("prepare", "--config", str(config), "--tokenizer", str(tokenizer_path),
                     "-o", str(tmp_path / "data"), "--synthetic-tag", tag)
        assert says in one_line_error(result)
        assert not (tmp_path / "data").exists()


def test_a_corpus_of_one_language_without_a_reverse_model_asks_for_one(tmp_path) -> None:
    # (tfm prepare back-translates it: tests/test_backtranslate_prepare.py)
    from tfm.errors import UsageError

    with pytest.raises(UsageError, match="corpora, entry 1: .*give reverse_model:"):
        corpora_from_config([{"train": "mono.de", "tgt_lang": "de"}])


# --- torchrun: two nodes on one machine -------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_torchrun_nodes_share_the_work_and_rank_0_joins_it_in_order(
        reverse_model, tmp_path) -> None:
    # Two torchrun agents (--nnodes 2, c10d rendezvous on loopback), one process each, over
    # gloo: the corpus equals one process's, byte for byte (sampling draws per sentence).
    mono = write_lines(tmp_path / "mono.de", GERMAN[:20])
    args = ["backtranslate", "-i", str(mono), "--reverse-model", str(reverse_model),
            "--lang", "de", "--into", "en", "--device", "cpu", "--beam", "1",
            "--sampling-topk", "0", "--sampling-seed", "4", "--chunk", "3", "--workers", "1"]
    single = tfm(*args, "-o", str(tmp_path / "one"))
    assert single.returncode == 0, single.stderr
    port = free_port()
    env = {**os.environ, **forked.script_environment(os.environ["PATH"]),
           "OMP_NUM_THREADS": "1"}
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
         "--monitor-interval=0.2", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
         "--rdzv_id=bt", "--local_addr=127.0.0.1", "-m", "tfm", *args,
         "-o", str(tmp_path / "two")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=env) for _ in range(2)]
    try:
        outcomes = [a.communicate(timeout=HANG) for a in agents]
    finally:
        for a in agents:
            kill_session(a)
    assert [a.returncode for a in agents] == [0, 0], [err for _, err in outcomes]
    assert corpus_bytes(tmp_path / "two") == corpus_bytes(tmp_path / "one")
    assert not (tmp_path / "two.work").exists()
