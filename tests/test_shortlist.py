"""Specifications of vocabulary shortlists (tfm.data.shortlist, tfm.decoding.shortlist,
``tfm shortlist``, ``--shortlist``, and their export as CTranslate2's vmap).

The model is a small one fitted to the 40 test pairs, and its shortlist is built from those
pairs prepared as a dataset, small (20 translations per source token, 20 frequent tokens) so
that it leaves out most of the 300-token vocabulary but holds what the model writes without
it. A tight one (3 and 3) leaves out tokens of every translation and n-best hypothesis the
model writes without it, so that decoding that ignored the shortlist would be seen.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import PAIRS, fit_to_pairs, tfm, write_corpus
from safetensors.numpy import save as st_save

from tfm.checkpoint import load_model_dir, save_recorded
from tfm.data.corpus import CorpusSpec
from tfm.data.dataset import TokenizedSplit
from tfm.data.prepare import prepare
from tfm.data.shortlist import Shortlist, build_shortlist
from tfm.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    save_tokenizer,
    train_tokenizer,
)
from tfm.decoding.constraints import ConstraintSpec, compile_constraints
from tfm.decoding.engines import load_translator
from tfm.decoding.shortlist import make_shortlist
from tfm.layout import ModelDir

TRAINED = [s for s, _ in PAIRS[:10]]
UNSEEN = ["A dog is reading the newspaper .", "Two cats are sleeping in the kitchen .",
          "The man rides a horse on the beach ."]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model directory, its training data prepared): a model fitted to the test pairs for
    120 steps (beam 4 by default), without a shortlist."""
    root = tmp_path_factory.mktemp("shortlist")
    tok = train_tokenizer((t for pair in PAIRS for t in pair), vocab_size=300)
    save_tokenizer(tok, root / "tok.json")
    write_corpus(root / "corpus", PAIRS)
    prepare(CorpusSpec((str(root / "corpus" / "train"),), "en", "de"), root / "tok.json",
            root / "data")
    fit_to_pairs(root / "model", tok)
    return root / "model", root / "data"


@pytest.fixture(scope="module")
def shortlisted(trained: tuple[Path, Path]) -> Path:
    """A copy of the trained model directory with its shortlist."""
    model, data = trained
    copy = model.parent / "shortlisted"
    shutil.copytree(model, copy)
    make_shortlist(data, copy, per_token=20, frequent=20)
    return copy


@pytest.fixture(scope="module")
def tight(trained: tuple[Path, Path]) -> Path:
    """A copy of the trained model directory with a shortlist of 3 translations per source
    token and 3 frequent tokens: the translations without it leave it (checked where used)."""
    model, data = trained
    copy = model.parent / "tight"
    shutil.copytree(model, copy)
    make_shortlist(data, copy, per_token=3, frequent=3)
    return copy


@pytest.fixture(scope="module")
def plain(trained: tuple[Path, Path]):
    return load_translator(trained[0], "cpu", workers=1)


@pytest.fixture(scope="module")
def narrowed(shortlisted: Path):
    return load_translator(shortlisted, "cpu", workers=1, shortlist=True)


@pytest.fixture(scope="module")
def tightened(tight: Path):
    return load_translator(tight, "cpu", workers=1, shortlist=True)


def translations(translator, sentences: list[str], n_best: int = 1, **asks) -> list:
    options = translator.default_options(n_best=n_best)
    return translator.translate(sentences, options, **asks)


def candidates(translator, sentence: str) -> set[int]:
    """The target ids ``sentence``'s shortlist allows."""
    [source] = translator.prepare([sentence])
    return set(translator.shortlist.candidates([source.ids]).tolist())


def target_ids(translator, text: str) -> list[int]:
    return translator.vocabs.tgt.encode(text, add_special_tokens=False).ids


def leaves_the_shortlist(plain, narrowed, sentences: list[str], n_best: int) -> bool:
    """Whether every one of the ``n_best`` hypotheses ``plain`` (no shortlist) finds for each
    sentence has a token outside the sentence's candidates in ``narrowed``'s shortlist."""
    options = plain.default_options(n_best=n_best)
    for source in plain.prepare(sentences):
        allowed = set(narrowed.shortlist.candidates([source.ids]).tolist())
        [hypotheses] = plain.search([source.ids], options)
        if any(set(h.tokens) <= allowed for h in hypotheses):
            return False
    return True


# --- building ---------------------------------------------------------------------------------

def test_each_source_token_lists_the_target_token_it_is_translated_into_first():
    # Source tokens 10, 11, 12 are translated into 20, 21, 22; 13 (a word on both sides of
    # every pair, as "the" and "die") into 23; each sentence ends with EOS (3), the NULL word.
    pairs = [([10, 13, 3], [20, 23]), ([11, 13, 3], [23, 21]), ([12, 10, 3], [22, 20]),
             ([11, 12, 13, 3], [21, 23, 22]), ([10, 11, 13, 3], [20, 23, 21])]
    split = TokenizedSplit(np.array([i for src, _ in pairs for i in src]),
                           np.cumsum([0] + [len(src) for src, _ in pairs]),
                           np.array([i for _, tgt in pairs for i in tgt]),
                           np.cumsum([0] + [len(tgt) for _, tgt in pairs]))
    shortlist = build_shortlist(split, 30, 30, per_token=2, frequent=1, iterations=10)
    assert [shortlist.per_source[s][0] for s in (10, 11, 12, 13)] == [20, 21, 22, 23]
    assert shortlist.per_source[5].tolist() == [-1, -1]  # never seen: nothing
    assert shortlist.frequent.tolist() == [23]  # in 4 pairs, the others in 3


def test_the_candidates_are_sorted_and_start_with_the_special_tokens():
    shortlist = Shortlist(np.array([[9, 7], [8, -1]] + [[-1, -1]] * 8), np.array([6]), 12)
    assert shortlist.candidates([[1, 0]]).tolist() == [0, 1, 2, 3, 6, 7, 8, 9]
    assert shortlist.candidates([[1]], extra=[11]).tolist() == [0, 1, 2, 3, 6, 8, 11]


def test_a_batch_has_the_union_of_its_sentences_candidates_and_each_keeps_its_own():
    shortlist = Shortlist(np.array([[9, 7], [8, -1]] + [[-1, -1]] * 8), np.array([6]), 12)
    ids, allowed = shortlist.batch_candidates([[0], [1]], extra=[[], [11]])
    assert ids.tolist() == [0, 1, 2, 3, 6, 7, 8, 9, 11]
    assert ids[allowed[0]].tolist() == [0, 1, 2, 3, 6, 7, 9]
    assert ids[allowed[1]].tolist() == [0, 1, 2, 3, 6, 8, 11]


def test_tfm_shortlist_writes_the_file_into_the_model_directory(trained, plain, tmp_path):
    model, data = trained
    copy = tmp_path / "model"
    shutil.copytree(model, copy)
    result = tfm("shortlist", "--data", str(data), "--model", str(copy), "--per-token", "5",
                 "--frequent", "5")
    assert result.returncode == 0, result.stderr
    assert ModelDir(copy).shortlist.is_file()
    assert "shortlist.safetensors" in (copy / "manifest.json").read_text()
    assert f"tfm translate --model {copy} --shortlist" in result.stderr
    # the file is the one --shortlist decodes with: translations within it, which the model
    # without it leaves
    narrowed = load_translator(copy, "cpu", workers=1, shortlist=True)
    assert narrowed.shortlist.per_source.shape[1] == 5 and len(narrowed.shortlist.frequent) == 5
    assert leaves_the_shortlist(plain, narrowed, UNSEEN, n_best=1)
    options = narrowed.default_options()
    for source in narrowed.prepare(UNSEEN):
        [[best]] = narrowed.search([source.ids], options)
        allowed = set(narrowed.shortlist.candidates([source.ids]).tolist())
        assert best.tokens and set(best.tokens) <= allowed


def test_a_dataset_of_another_tokenizer_is_refused_in_one_line(trained, dataset, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(trained[0], copy)
    result = tfm("shortlist", "--data", str(dataset), "--model", str(copy))
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert "prepared with another tokenizer" in line
    assert not ModelDir(copy).shortlist.exists()


# --- decoding ---------------------------------------------------------------------------------

def test_a_shortlist_of_the_whole_vocabulary_changes_nothing(plain, shortlisted):
    everything = load_translator(shortlisted, "cpu", workers=1, shortlist=True)
    vocab = everything.model.config.tgt_vocab_size
    everything.shortlist = replace(everything.shortlist,
                                   frequent=np.arange(vocab, dtype=np.int32))
    sentences = TRAINED + UNSEEN
    for a, b in zip(translations(plain, sentences, 3), translations(everything, sentences, 3)):
        assert a.hypotheses == b.hypotheses
    # ... and one token fewer does: the best translation's first token, left out, is not
    # written, so this shortlist is the one decoded with
    [source] = plain.prepare([UNSEEN[0]])
    [[best]] = plain.search([source.ids], plain.default_options())
    left_out = best.tokens[0]
    everything.shortlist = replace(
        everything.shortlist, per_source=np.full_like(everything.shortlist.per_source, -1),
        frequent=np.array([i for i in range(vocab) if i != left_out], dtype=np.int32))
    [[without]] = everything.search([source.ids], plain.default_options())
    assert without.tokens and left_out not in without.tokens


def test_a_shortlist_that_holds_the_translation_keeps_it(plain, narrowed):
    vocab = narrowed.model.config.tgt_vocab_size
    options = plain.default_options()
    for source in plain.prepare(TRAINED):
        [[best]] = plain.search([source.ids], options)
        allowed = narrowed.shortlist.candidates([source.ids]).tolist()
        assert len(allowed) < vocab / 3  # a shortlist that leaves most tokens out
        assert set(best.tokens) <= set(allowed)
        [[kept]] = narrowed.search([source.ids], options)
        assert kept.tokens == best.tokens
        # its log-probability normalised over the shortlist, not the whole vocabulary
        assert kept.log_prob > best.log_prob + 1e-4


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_each_sentence_is_translated_as_if_it_were_alone(plain, tightened, tight, precision):
    # The tight shortlist: each sentence's own candidates are fewer than its batch's, and
    # the model's translations without a shortlist leave them.
    sentences = TRAINED[:5] + UNSEEN
    assert leaves_the_shortlist(plain, tightened, sentences, n_best=2)
    if precision != "fp32":  # --shortlist with --precision int8: the same search over both
        tightened = load_translator(tight, "cpu", precision, workers=1, shortlist=True)
    options = tightened.default_options(n_best=2)
    sources = tightened.prepare(sentences)
    together = tightened.search([s.ids for s in sources], options)
    for source, batched in zip(sources, together):
        [alone] = tightened.search([source.ids], options)
        assert [h.tokens for h in alone] == [h.tokens for h in batched]
        assert [h.score for h in alone] == pytest.approx([h.score for h in batched], abs=1e-5)
        allowed = set(tightened.shortlist.candidates([source.ids]).tolist())
        assert all(h.tokens and set(h.tokens) <= allowed for h in batched)


def test_n_best_hypotheses_are_in_full_vocabulary_ids_within_the_shortlist(plain, tightened):
    narrowed = tightened  # without it, each of the 3 best of each sentence leaves it
    assert leaves_the_shortlist(plain, narrowed, UNSEEN, n_best=3)
    options = narrowed.default_options(beam=4, n_best=3)
    sources = narrowed.prepare(UNSEEN)
    found = narrowed.search([s.ids for s in sources], options)
    for source, hypotheses in zip(sources, found):
        assert len(hypotheses) == 3
        assert len({tuple(h.tokens) for h in hypotheses}) == 3
        allowed = set(narrowed.shortlist.candidates([source.ids]).tolist())
        for h in hypotheses:
            assert h.tokens and set(h.tokens) <= allowed - {PAD_ID, BOS_ID, EOS_ID}
    texts = translations(narrowed, UNSEEN, n_best=3)
    assert all(len(t.hypotheses) == 3 for t in texts)
    assert texts[0].text == narrowed.vocabs.tgt.decode(found[0][0].tokens).strip()


def test_a_constraint_outside_the_shortlist_is_still_met(plain, tightened):
    narrowed = tightened
    sentence = UNSEEN[0]
    allowed = candidates(narrowed, sentence)
    # German words the shortlist cannot write: a token of each is not in it
    outside = [word for _, german in PAIRS for word in german.split()
               if not set(target_ids(narrowed, " " + word)) <= allowed]
    phrase, start = outside[0], outside[1]
    tokens = compile_constraints(narrowed.vocabs.tgt, ConstraintSpec([phrase], start), 20)
    assert not set(tokens.phrases[0].forms[0]) <= allowed
    assert not set(tokens.prefix) <= allowed
    [result] = translations(narrowed, [sentence],
                            constraints=[ConstraintSpec([phrase], prefix=start)])
    assert result.constraints_met
    assert phrase in result.text and result.text.startswith(start)
    # the constraints' tokens join the sentence's candidates; nothing else does (without the
    # shortlist, the model writes other tokens too)
    own = allowed | {t for form in tokens.phrases[0].forms for t in form} | set(tokens.prefix)
    [source] = narrowed.prepare([sentence])
    [[found]] = narrowed.search([source.ids], narrowed.default_options(), [tokens])
    [[unlisted]] = plain.search([source.ids], plain.default_options(), [tokens])
    assert not set(unlisted.tokens) <= own
    assert set(found.tokens) <= own
    assert narrowed.vocabs.tgt.decode(found.tokens).strip() == result.text


def test_translate_without_a_shortlist_refuses_shortlist_in_one_line(trained):
    result = tfm("translate", "--model", str(trained[0]), "--shortlist", "Hello .")
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("error: --shortlist:")
    assert f"tfm shortlist --data DATA --model {trained[0]}" in line


def test_an_ensemble_with_a_shortlist_is_refused_in_one_line(shortlisted):
    result = tfm("translate", "--model", str(shortlisted), "--ensemble", str(shortlisted),
                 "--shortlist", "Hello .")
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert "--shortlist decodes one model, not an --ensemble" in line


# --- the model directory for readers old and new ----------------------------------------------

def test_a_model_directory_with_a_shortlist_loads_and_translates_as_before(trained, shortlisted,
                                                                           plain):
    model, _ = trained
    assert (shortlisted / "config.json").read_bytes() == (model / "config.json").read_bytes()
    load_model_dir(shortlisted)  # the reader, which knows nothing of the shortlist
    without = load_translator(shortlisted, "cpu", workers=1)
    sentences = TRAINED + UNSEEN
    for a, b in zip(translations(plain, sentences, 3), translations(without, sentences, 3)):
        assert a.hypotheses == b.hypotheses
    # only --shortlist decodes with it: its scores are normalised over the shortlist
    with_it = load_translator(shortlisted, "cpu", workers=1, shortlist=True)
    assert [t.hypotheses for t in translations(with_it, sentences, 3)] != [
        t.hypotheses for t in translations(without, sentences, 3)]


def test_a_shortlist_of_a_newer_format_is_refused_in_one_line(shortlisted, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(shortlisted, copy)
    newer = st_save({"per_source": np.zeros((1, 1), dtype=np.int32),
                     "frequent": np.zeros(1, dtype=np.int32)},
                    metadata={"format_version": "99", "tgt_vocab_size": "1", "provenance": "{}"})
    save_recorded(copy, {ModelDir(copy).shortlist: newer})
    result = tfm("translate", "--model", str(copy), "--shortlist", "Hello .")
    assert result.returncode != 0
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert "shortlist format 99 is newer than this tfm understands" in line
    assert tfm("translate", "--model", str(copy), "Hello .").returncode == 0


# --- export -----------------------------------------------------------------------------------

def test_the_ctranslate2_export_carries_the_shortlist_as_its_vmap(tight, tightened, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from tfm.interop.ctranslate2 import export_ctranslate2

    narrowed = tightened  # CTranslate2 without the vmap leaves it
    export = export_ctranslate2(tight, tmp_path / "ct2")
    lines = (export / "vmap.txt").read_text(encoding="utf-8").splitlines()
    tgt = narrowed.vocabs.tgt
    assert lines[0].split("\t") == ["", " ".join(tgt.id_to_token(int(i))
                                                 for i in narrowed.shortlist.frequent)]
    by_source = dict(line.split("\t") for line in lines[1:])
    src = narrowed.vocabs.src
    for token_id, targets in enumerate(narrowed.shortlist.per_source.tolist()):
        listed = [tgt.id_to_token(i) for i in targets if i >= 0]
        assert by_source.get(src.id_to_token(token_id), "").split() == listed
    # CTranslate2 decodes with it, within the sentence's candidates, which it leaves without
    [source] = narrowed.prepare([UNSEEN[0]])
    translator = ctranslate2.Translator(str(export), device="cpu")
    tokens = [[src.id_to_token(i) for i in source.ids]]
    [result] = translator.translate_batch(tokens, beam_size=4, use_vmap=True)
    [unmapped] = translator.translate_batch(tokens, beam_size=4, use_vmap=False)
    allowed = {tgt.id_to_token(i) for i in candidates(narrowed, UNSEEN[0])}
    assert result.hypotheses[0] and set(result.hypotheses[0]) <= allowed
    assert not set(unmapped.hypotheses[0]) <= allowed
