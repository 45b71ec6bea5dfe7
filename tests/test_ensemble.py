"""Ensemble decoding: several models with one tokenizer, their probabilities averaged per step."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from conftest import random_model_dir, tfm, tiny_config
from tokenizers import Tokenizer

from tfm.checkpoint import save_model_dir
from tfm.config import SearchOptions
from tfm.data.tokenizer import train_tokenizer
from tfm.decoding.engines import load_translator
from tfm.errors import UsageError
from tfm.model import Transformer
from tfm.model.ensemble import Ensemble
from tfm.model_info import ModelInfo
from tfm.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

SENTENCES = ["The dog sleeps in the garden.", "A man rides a bike."]


@pytest.fixture
def two_models(tmp_path: Path, tokenizer: Tokenizer) -> tuple[Path, Path]:
    return (random_model_dir(tmp_path / "a", tokenizer, seed=1),
            random_model_dir(tmp_path / "b", tokenizer, seed=2))


def test_each_step_is_the_log_of_the_members_mean_probability(tokenizer: Tokenizer) -> None:
    vocab = tokenizer.get_vocab_size()
    torch.manual_seed(0)
    a, b = Transformer(tiny_config(vocab)).eval(), Transformer(tiny_config(vocab)).eval()
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tokens = torch.tensor([BOS_ID, BOS_ID])
    ensemble = Ensemble([a, b]).eval()
    with torch.no_grad():
        got, _, weights = ensemble.decode_step(
            tokens, ensemble.start_decoding(*ensemble.encode(src)), need_weights=True)
        expected = []
        for m in (a, b):
            logits, _, _ = m.decode_step(tokens, m.start_decoding(*m.encode(src)))
            expected.append(torch.softmax(logits, dim=-1))
    assert torch.allclose(got, torch.log((expected[0] + expected[1]) / 2), atol=1e-5)
    assert torch.allclose(got.exp().sum(dim=-1), torch.ones(2), atol=1e-5)  # a distribution
    # One attention row per sentence over its source positions; the padded one gets none.
    assert weights is not None and weights.shape == (2, 1, 4)
    assert weights[1, 0, 3] == 0


@pytest.mark.parametrize("beam", [1, 4])
def test_a_model_ensembled_with_itself_translates_as_it_does_alone(
        two_models: tuple[Path, Path], beam: int) -> None:
    a, _ = two_models
    options = SearchOptions(beam=beam, max_len_a=0.0, max_len_b=12)
    alone = load_translator(a, "cpu").translate(SENTENCES, options)
    doubled = load_translator(a, "cpu", ensemble=[a]).translate(SENTENCES, options)
    assert [t.hypotheses[0][0] for t in doubled] == [t.hypotheses[0][0] for t in alone]
    for d, s in zip(doubled, alone):
        assert math.isclose(d.hypotheses[0][1], s.hypotheses[0][1], abs_tol=1e-4)


def test_two_models_decode_greedily_by_their_averaged_probabilities(
        two_models: tuple[Path, Path]) -> None:
    a, b = two_models
    translator = load_translator(a, "cpu", ensemble=[b])
    assert translator.describe()["ensemble"] == 2
    # The first token, EOS forbidden there (min_len 1): the search also never emits PAD, UNK, BOS.
    options = SearchOptions(beam=1, max_len_a=0.0, max_len_b=3, min_len=1)
    [source] = translator.prepare([SENTENCES[0]])
    [[first]] = translator.search([source.ids], options)
    members = [load_translator(d, "cpu").model for d in (a, b)]
    src = torch.tensor([source.ids])
    with torch.no_grad():
        probs = []
        for m in members:
            logits, _, _ = m.decode_step(torch.tensor([BOS_ID]), m.start_decoding(*m.encode(src)))
            probs.append(torch.softmax(logits, dim=-1))
    mean = (probs[0] + probs[1]) / 2
    mean[:, [PAD_ID, UNK_ID, BOS_ID, EOS_ID]] = 0
    assert first.tokens[0] == int(mean.argmax())


def test_models_with_another_tokenizer_or_direction_are_refused(
        tmp_path: Path, two_models: tuple[Path, Path], sentence_pairs: list[tuple[str, str]]
) -> None:
    a, _ = two_models
    other = train_tokenizer((t for pair in sentence_pairs for t in pair), vocab_size=280)
    foreign = random_model_dir(tmp_path / "foreign", other, seed=3)
    with pytest.raises(UsageError, match="tokenizer differs"):
        load_translator(a, "cpu", ensemble=[foreign])
    reverse = random_model_dir(tmp_path / "en-fr", load_translator(a, "cpu").vocabs.src, 4,
                               tgt="fr")
    with pytest.raises(UsageError, match="translates en-fr"):
        load_translator(a, "cpu", ensemble=[reverse])


def test_the_command_line_ensembles_in_translate_and_eval(
        tmp_path: Path, two_models: tuple[Path, Path]) -> None:
    a, b = two_models
    # What the library's ensemble translates, which is not what its first model does alone:
    # the commands must give the ensemble's.
    ensemble, alone = (t.translate(SENTENCES, t.default_options(beam=2)) for t in (
        load_translator(a, "cpu", ensemble=[b]), load_translator(a, "cpu")))
    assert [t.hypotheses[0][1] for t in ensemble] != pytest.approx(
        [t.hypotheses[0][1] for t in alone], abs=1e-3)
    assert [t.text for t in ensemble] != [t.text for t in alone]
    translated = tfm("translate", "-m", str(a), "--ensemble", str(b), "--beam", "2", "--device",
                     "cpu", "--format", "jsonl", *SENTENCES)
    assert translated.returncode == 0, translated.stderr
    records = [json.loads(line) for line in translated.stdout.splitlines()]
    assert [r["translation"] for r in records] == [t.text for t in ensemble]
    assert [r["score"] for r in records] == pytest.approx(
        [t.hypotheses[0][1] for t in ensemble], abs=1e-4)
    src = tmp_path / "src.en"
    src.write_text("\n".join(SENTENCES) + "\n")
    evaluated = tfm("eval", "-m", str(a), "--ensemble", str(b), "--beam", "2", "--src",
                    str(src), "--ref", str(src), "--device", "cpu", "--save-hyp",
                    str(tmp_path / "hyp"))
    assert evaluated.returncode == 0, evaluated.stderr
    assert "BLEU" in evaluated.stdout + evaluated.stderr
    assert (tmp_path / "hyp").read_text().splitlines() == [t.text for t in ensemble]
    refused = tfm("eval", "-m", str(a), "--ensemble", str(b), "--hyp", str(src), "--ref", str(src))
    assert refused.returncode == 2
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--ensemble" in lines[0]


def test_a_numbered_checkpoint_is_read_from_every_member(
        tmp_path: Path, tokenizer: Tokenizer) -> None:
    # Runs trained side by side save checkpoints of the same names: decoding one step of all
    # of them (bench/curve.py --ensemble) reads that step's weights from each member.
    a = random_model_dir(tmp_path / "a", tokenizer, seed=1)
    b = random_model_dir(tmp_path / "b", tokenizer, seed=2)
    checkpoint = "checkpoints/step_00000010.safetensors"
    for directory, seed in ((a, 3), (b, 4)):
        torch.manual_seed(seed)
        model = Transformer(tiny_config(tokenizer.get_vocab_size()))
        save_model_dir(directory, model, tokenizer,
                       ModelInfo(model.config, src_lang="en", tgt_lang="de"),
                       weights_file=checkpoint)
    members = load_translator(a, "cpu", weights_file=checkpoint, ensemble=[b]).model.members
    for member, directory in zip(members, (a, b)):
        saved = load_translator(directory, "cpu", weights_file=checkpoint).model
        final = load_translator(directory, "cpu").model
        assert torch.equal(member.output_proj.weight, saved.output_proj.weight)
        assert not torch.equal(member.output_proj.weight, final.output_proj.weight)
    only_a = "checkpoints/step_00000020.safetensors"
    model = Transformer(tiny_config(tokenizer.get_vocab_size()))
    save_model_dir(a, model, tokenizer, ModelInfo(model.config, src_lang="en", tgt_lang="de"),
                   weights_file=only_a)
    with pytest.raises(Exception, match="b/checkpoints/step_00000020"):  # b has no such step
        load_translator(a, "cpu", weights_file=only_a, ensemble=[b])
