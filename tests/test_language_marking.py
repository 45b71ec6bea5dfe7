"""Specifications of the direction as a typed value (tfm.data.language_marks): a request says
which language to translate into, and the model's metadata says where that language's token
goes: before the source text (``source_tag``: tfm's multilingual models, OPUS-MT), or as the
decoder's first forced token (``decoder_token``); the model's languages resolve a request's
once into a ``ResolvedLanguage``, by one function (``mark``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import PAIRS, tiny_config

from tfm.checkpoint import save_model_dir
from tfm.config import SearchOptions
from tfm.data.language_marks import (
    LanguageError,
    LanguageMarking,
    ModelLanguages,
    ResolvedLanguage,
    mark,
    tag,
    tagged,
)
from tfm.data.tokenizer import Vocabularies, decode, encode_batch, train_tokenizer
from tfm.decoding.engines import load_translator
from tfm.decoding.search import search
from tfm.errors import ModelError, UsageError
from tfm.layout import CONFIG_FILE
from tfm.model import Transformer
from tfm.model_info import ModelInfo, read_model_info
from tfm.special_tokens import BOS_ID, EOS_ID

TAGS = [tag("de"), tag("fr")]
SENTENCES = ["A man is sleeping.", "Two dogs play in the snow.", "   ", "The girl laughs."]


def tagged_tokenizer():
    return train_tokenizer((t for pair in PAIRS for t in pair), vocab_size=300, tags=TAGS)


def model_dir(path: Path, marking: LanguageMarking | None, seed: int = 0) -> Path:
    tok = tagged_tokenizer()
    torch.manual_seed(seed)
    config = tiny_config(tok.get_vocab_size())
    info = ModelInfo(config, src_lang="en", tgt_lang=None, directions=["en-de", "en-fr"],
                     language_marking=marking)
    save_model_dir(path, Transformer(config), tok, info)
    return path


def test_mark_applies_each_marking_in_one_place() -> None:
    ids = {">>fr<<": 17}.get
    assert mark(LanguageMarking("none"), ">>fr<<", ids) == ResolvedLanguage()
    assert mark(LanguageMarking("source_tag"), ">>fr<<", ids) == ResolvedLanguage(
        "source_tag", token=">>fr<<", source_tag=">>fr<<")
    assert mark(LanguageMarking("decoder_token"), ">>fr<<", ids) == ResolvedLanguage(
        "decoder_token", token=">>fr<<", start=(BOS_ID, 17))
    assert mark(LanguageMarking("decoder_token"), None, ids) == ResolvedLanguage("decoder_token")
    with pytest.raises(UsageError, match="no >>it<< token"):
        mark(LanguageMarking("decoder_token"), ">>it<<", ids)
    with pytest.raises(UsageError, match="choose none, source_tag, decoder_token"):
        LanguageMarking("target_suffix")
    # One rule for an empty text, in prepare and in decoding alike.
    assert tagged("x", ">>de<<") == ">>de<< x" and tagged("  ", ">>de<<") == "  "


def test_a_language_is_resolved_once_into_a_value_that_knows_its_marking() -> None:
    ids = {">>de<<": 16, ">>fr<<": 17}
    for where, source_tag, start in (("source_tag", ">>fr<<", (BOS_ID,)),
                                     ("decoder_token", None, (BOS_ID, 17)),
                                     ("source_and_decoder", ">>fr<<", (BOS_ID, 17))):
        languages = ModelLanguages(LanguageMarking(where), tuple(ids), ids.get, ids.get)
        assert languages.targets == ["de", "fr"]
        for asked in ("fr", ">>fr<<"):
            fr = languages.resolve(asked)
            assert (fr.target, fr.source_tag, fr.start) == ("fr", source_tag, start)
            # Its source marking, at the token level too (training stores sources so).
            assert fr.source_ids([9, 8]) == ([17] if source_tag else []) + [9, 8, EOS_ID]
            assert fr.text_ids(fr.source_ids([9, 8])) == [9, 8]
    # The library says what is wrong and which languages there are; each edge names its
    # option (the command line --target-lang, the server target_lang).
    with pytest.raises(LanguageError) as refused:
        languages.resolve("it")
    assert refused.value.side == "target" and refused.value.value == "it"
    assert refused.value.known == (">>de<<", ">>fr<<")
    assert refused.value.worded("target_lang") == \
        "target_lang it: the model has no >>it<< token; it has de, fr"
    with pytest.raises(LanguageError, match="target language is needed") as refused:
        languages.resolve(None)  # a decoder token has no other way to be given
    assert refused.value.worded("--target-lang").startswith("--target-lang is needed")


def test_a_model_of_language_codes_starts_from_eos_and_marks_both_sides() -> None:
    marking = LanguageMarking("language_codes", ("deu_Latn", "eng_Latn"))
    ids = {"deu_Latn": 30, "eng_Latn": 31}
    languages = ModelLanguages(marking, ("deu_Latn", "eng_Latn"), ids.get, ids.get)
    assert marking.decoder_start == EOS_ID and LanguageMarking().decoder_start == BOS_ID
    assert languages.needs_source
    de = languages.resolve("deu_Latn", "eng_Latn")
    assert (de.target, de.source, de.start, de.source_prefix) == (
        "deu_Latn", "eng_Latn", (EOS_ID, 30), (31,))
    assert de.source_ids([9]) == [31, 9, EOS_ID]
    with pytest.raises(LanguageError) as refused:
        languages.resolve("deu_Latn", "klingon")
    assert refused.value.side == "source"
    assert refused.value.worded("--source-lang").startswith(
        "--source-lang klingon: not a language code of this model")


def test_the_marking_is_model_metadata_that_round_trips(tmp_path: Path) -> None:
    marked = read_model_info(model_dir(tmp_path / "m", LanguageMarking("decoder_token")))
    assert marked.language_marking == LanguageMarking("decoder_token")
    data = json.loads((tmp_path / "m" / CONFIG_FILE).read_text())
    assert data["format_version"] == 2 and data["language_marking"] == {"where": "decoder_token"}
    # A model saved before the field existed: none recorded (inferred from its vocabulary),
    # and still format 1, which older tfm versions read.
    plain = json.loads(json.dumps(ModelInfo(marked.model).to_json()))
    assert "language_marking" not in plain and plain["format_version"] == 1
    assert ModelInfo.from_json(plain, "x").language_marking is None
    with pytest.raises(ModelError, match="invalid model config"):
        ModelInfo.from_json({**plain, "language_marking": {"where": "sideways"}}, "x")


def test_a_decoder_token_model_is_fed_the_language_token_after_bos(tmp_path: Path) -> None:
    translator = load_translator(model_dir(tmp_path / "m", LanguageMarking("decoder_token")),
                                 "cpu")
    vocabs: Vocabularies = translator.vocabs
    fr = vocabs.tgt.token_to_id(">>fr<<")
    assert translator.languages.tags == tuple(TAGS)
    sources = translator.prepare(SENTENCES, language=translator.languages.resolve("fr"))
    # The source text is untouched; the decoder starts from <s> >>fr<<.
    plain = encode_batch(vocabs.src, [SENTENCES[0]])[0] + [EOS_ID]
    assert sources[0].ids == plain and sources[0].sentence == SENTENCES[0]
    assert {s.start for s in sources} == {(BOS_ID, fr)}
    options = SearchOptions(beam=3, length_penalty=0.0)
    results = translator.translate_prepared(sources, options)
    for source, result in zip(sources, results):
        if not source.ids:
            assert result.text == ""
            continue
        src = torch.tensor([source.ids])
        [hyps] = search(translator.model, src, options, start=torch.tensor([[BOS_ID, fr]]))
        assert result.text == decode(vocabs.tgt, hyps[0].tokens)
        assert result.hypotheses[0][1] == pytest.approx(hyps[0].score, abs=1e-4)
    # Another language, another start: the language reaches the decoder.
    de = translator.translate(SENTENCES, options, language=translator.languages.resolve("de"))
    assert [r.text for r in de] != [r.text for r in results]


def test_a_decoder_token_model_refuses_a_missing_or_unknown_language(tmp_path: Path) -> None:
    translator = load_translator(model_dir(tmp_path / "m", LanguageMarking("decoder_token")),
                                 "cpu")
    with pytest.raises(LanguageError, match="target language is needed: this model "
                                            "translates into de, fr"):
        translator.prepare(SENTENCES)
    with pytest.raises(LanguageError, match="no >>it<< token; it has de, fr"):
        translator.languages.resolve("it")


def test_a_source_tag_model_reads_the_tag_before_the_text(tmp_path: Path) -> None:
    # Saved without a marking: inferred from the vocabulary's tags, as every model before.
    translator = load_translator(model_dir(tmp_path / "m", None), "cpu")
    assert translator.languages.marking == LanguageMarking("source_tag")
    [source] = translator.prepare(SENTENCES[:1], language=translator.languages.resolve("fr"))
    assert source.sentence == ">>fr<< " + SENTENCES[0] and source.start == (BOS_ID,)
    assert source.ids[0] == translator.vocabs.src.token_to_id(">>fr<<")


def test_the_ctranslate2_engine_starts_a_decoder_token_model_alike(tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    from tfm.interop.ctranslate2 import export_ctranslate2

    model = model_dir(tmp_path / "m", LanguageMarking("decoder_token"), seed=3)
    export = export_ctranslate2(model, tmp_path / "ct2")
    from tfm.decoding.ctranslate2_engine import CTranslate2Translator

    ours, one_pass = load_translator(model, "cpu"), load_translator(export, "cpu")
    exact = CTranslate2Translator(export, "cpu", "fp32", exact=True)
    assert one_pass.languages.marking == LanguageMarking("decoder_token")
    fr = ours.languages.resolve("fr")
    assert one_pass.languages.resolve("fr") == fr  # the same value, whichever engine
    for theirs, options in ((one_pass, SearchOptions(beam=1)),
                            (one_pass, SearchOptions(beam=4, length_penalty=0.0)),
                            (exact, SearchOptions(beam=4, length_penalty=0.0, n_best=2))):
        mine = ours.translate(SENTENCES, options, language=fr)
        found = theirs.translate(SENTENCES, options, language=fr)
        for a, b in zip(mine, found):
            assert [t for t, _ in a.hypotheses] == [t for t, _ in b.hypotheses], options
            assert [s for _, s in b.hypotheses] == pytest.approx([s for _, s in a.hypotheses],
                                                                 abs=1e-4)
