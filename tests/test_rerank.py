"""Forced-decoding scores, and beam hypotheses ranked anew by a reverse-direction model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import random_model_dir, tfm
from tokenizers import Tokenizer

from tfm.config import SearchOptions
from tfm.data.tokenizer import encode_batch
from tfm.decoding.engines import load_translator
from tfm.decoding.rerank import ReverseModelReranker, attach_reverse_model
from tfm.decoding.torch_engine import TorchTranslator
from tfm.errors import UsageError
from tfm.special_tokens import BOS_ID, EOS_ID

SOURCES = ["The dog sleeps in the garden.", "A man rides a bike.", "Two women walk.",
           "Children are building a sandcastle on the beach with their father ."]
TARGETS = ["Der Hund schläft.", "Ein Mann fährt Fahrrad im Park.", "", "Kinder bauen ."]


@pytest.fixture
def forward_dir(tmp_path: Path, tokenizer: Tokenizer) -> Path:
    return random_model_dir(tmp_path / "en-de", tokenizer, seed=3)


@pytest.fixture
def reverse_dir(tmp_path: Path, tokenizer: Tokenizer) -> Path:
    return random_model_dir(tmp_path / "de-en", tokenizer, seed=4, src="de", tgt="en")


def step_by_step(translator: TorchTranslator, source: str, target: str) -> float:
    """log P(target | source) summed one decoding step at a time, as search computes it."""
    vocabs = translator.vocabs
    src = torch.tensor([encode_batch(vocabs.src, [source])[0] + [EOS_ID]])
    gold = encode_batch(vocabs.tgt, [target])[0] + [EOS_ID]
    model = translator.model
    with torch.inference_mode():
        state = model.start_decoding(*model.encode(src))
        total, token = 0.0, BOS_ID
        for next_token in gold:
            logits, state, _ = model.decode_step(torch.tensor([token]), state)
            total += float(torch.log_softmax(logits.float(), dim=-1)[0, next_token])
            token = next_token
    return total


@pytest.mark.parametrize("members", [1, 2])
def test_forced_decoding_scores_are_the_models_step_by_step_log_probabilities(
        forward_dir: Path, tmp_path: Path, tokenizer: Tokenizer, members: int) -> None:
    ensemble = [random_model_dir(tmp_path / "second", tokenizer, seed=9)] if members > 1 else []
    translator = TorchTranslator(forward_dir, "cpu", ensemble=ensemble)
    together = translator.score(SOURCES, TARGETS)
    for source, target, (log_p, length) in zip(SOURCES, TARGETS, together):
        # Batched with pairs of other lengths (padding), in a small token budget (several
        # batches) or alone: the same score, the one step-by-step decoding gives.
        assert log_p == pytest.approx(step_by_step(translator, source, target), abs=1e-4)
        assert translator.score([source], [target], batch_tokens=8) == [
            pytest.approx((log_p, length), abs=1e-4)]
        assert length == len(encode_batch(translator.vocabs.tgt, [target])[0]) + 1
        assert log_p < 0
    assert translator.score([], []) == []


def test_forced_decoding_takes_texts_longer_than_the_model(forward_dir: Path) -> None:
    translator = TorchTranslator(forward_dir, "cpu")
    longest = translator.max_source_tokens
    long_text = " ".join(["garden"] * (2 * longest))
    for source, target in ((long_text, "Der Hund."), ("The dog.", long_text)):
        [(log_p, length)] = translator.score([source], [target])
        assert log_p < 0 and length <= longest  # both sides cut to what the model takes


def position(hypotheses: list[tuple[str, float]], hypothesis: tuple[str, float]) -> int:
    """Where ``hypothesis`` (text, score) is in ``hypotheses``, its score compared to 1e-5."""
    [k] = [k for k, (text, score) in enumerate(hypotheses)
           if text == hypothesis[0] and abs(score - hypothesis[1]) < 1e-5]
    return k


def test_the_reranker_ranks_by_score_plus_weight_times_reverse_log_prob_per_source_token(
        forward_dir: Path, reverse_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    translator = load_translator(forward_dir, "cpu")
    reverse = TorchTranslator(reverse_dir, "cpu")
    beam = SearchOptions(beam=4, n_best=4, max_len_a=0.0, max_len_b=8)
    plain = translator.translate(SOURCES, beam)
    translator.reranker = ReverseModelReranker(reverse, weight=50.0)
    reranked = translator.translate(SOURCES, beam)
    changed = 0
    for source, p, r in zip(SOURCES, plain, reranked):
        texts = [t for t, _ in p.hypotheses]
        channel = reverse.score(texts, [source] * len(texts))
        combined = [s + 50.0 * log_p / n for (_, s), (log_p, n) in zip(p.hypotheses, channel)]
        # The same four hypotheses (a random model can write one text twice: told apart by
        # their scores), with the forward model's scores, in the order of the combined scores.
        order = [position(p.hypotheses, hyp) for hyp in r.hypotheses]
        assert sorted(order) == [0, 1, 2, 3]
        assert [combined[k] for k in order] == sorted(combined, reverse=True)
        changed += order[0] != 0
    assert changed  # the reverse model did change a choice: the test can tell the two apart

    # With --mbr, the combined scores are MBR's weights.
    seen = []
    monkeypatch.setattr("tfm.decoding.translator.mbr_order",
                        lambda texts, scores, lengths, utility: seen.append(list(scores))
                        or list(range(len(texts))))
    [result] = translator.translate([SOURCES[0]], SearchOptions(
        beam=4, max_len_a=0.0, max_len_b=8, mbr="bleu"))
    texts = [t for t, _ in plain[0].hypotheses]
    channel = reverse.score(texts, [SOURCES[0]] * 4)
    assert seen == [pytest.approx([s + 50.0 * log_p / n for (_, s), (log_p, n)
                                   in zip(plain[0].hypotheses, channel)], abs=1e-5)]


def test_attaching_a_reverse_model_checks_directions_beam_and_weight(
        forward_dir: Path, reverse_dir: Path) -> None:
    translator = load_translator(forward_dir, "cpu")
    with pytest.raises(UsageError, match="needs a model of de-en"):
        attach_reverse_model(translator, [forward_dir], device="cpu", beam=4)
    with pytest.raises(UsageError, match="--beam 2"):
        attach_reverse_model(translator, [reverse_dir], device="cpu", beam=1)
    with pytest.raises(UsageError, match="--reverse-weight"):
        attach_reverse_model(translator, [reverse_dir], weight=-1.0, device="cpu", beam=4)
    assert translator.reranker is None
    attach_reverse_model(translator, [reverse_dir, reverse_dir], 0.5, device="cpu", beam=4)
    assert translator.reranker.weight == 0.5


def test_the_command_line_takes_a_reverse_model_in_translate_and_eval(
        tmp_path: Path, forward_dir: Path, reverse_dir: Path) -> None:
    translated = tfm("translate", "-m", str(forward_dir), "--beam", "4", "--mbr", "bleu",
                     "--reverse-model", str(reverse_dir), "--device", "cpu", *SOURCES)
    assert translated.returncode == 0, translated.stderr
    assert len(translated.stdout.splitlines()) == len(SOURCES)
    src = tmp_path / "src.en"
    src.write_text("\n".join(SOURCES) + "\n")
    evaluated = tfm("eval", "-m", str(forward_dir), "--src", str(src), "--ref", str(src), "--beam",
                    "4", "--reverse-model", str(reverse_dir), "--reverse-weight", "0.5", "--device",
                    "cpu")
    assert evaluated.returncode == 0, evaluated.stderr
    assert "BLEU" in evaluated.stdout and "reranked by the reverse model" in evaluated.stderr
    for wrong, message in ((["--reverse-model", str(reverse_dir), "--beam", "1"], "--beam 2"),
                           (["--reverse-model", str(forward_dir)], "needs a model of de-en")):
        refused = tfm("translate", "-m", str(forward_dir), "--device", "cpu", *wrong, "Hello.")
        assert refused.returncode == 2
        lines = [line for line in refused.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], refused.stderr
