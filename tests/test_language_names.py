"""Specifications of languages given by name: one table (tfm.data.language_names) names a
language on the server's page and reads it back in ``--target-lang``, ``--source-lang`` and a
request's ``target_lang`` and ``source_lang`` (ModelLanguages.resolve)."""

from __future__ import annotations

import pytest

from tfm.data.language_marks import LanguageError, LanguageMarking, ModelLanguages
from tfm.data.language_names import code_of, labelled, language_name, matching, names_of

NLLB = ("arb_Arab", "arb_Latn", "deu_Latn", "eng_Latn", "fra_Latn")


def nllb() -> ModelLanguages:
    ids = {code: 30 + i for i, code in enumerate(NLLB)}
    return ModelLanguages(LanguageMarking("language_codes", NLLB), NLLB, ids.get, ids.get)


def tagged(sources: tuple[str, ...] = ()) -> ModelLanguages:
    ids = {">>de<<": 16, ">>fr<<": 17}
    return ModelLanguages(LanguageMarking("source_tag"), tuple(ids), ids.get, ids.get,
                          "en", None, sources)


def test_a_code_has_its_language_s_name_and_its_script_s():
    assert language_name("de") == language_name("deu") == language_name(">>de<<") == "German"
    assert language_name("deu_Latn") == "German (Latin)"
    assert language_name("zho_Hant") == "Chinese (Traditional)"
    assert language_name("pt_BR") == "Portuguese (BR)"
    assert language_name("ace_Arab") is None and language_name("not a code") is None
    assert labelled("deu_Latn") == "German (Latin) (deu_Latn)" and labelled("xyz") == "xyz"
    assert names_of(["de", "xyz"]) == {"de": "German"}
    assert code_of("  GERMAN ") == "de" and code_of("Klingon") is None


def test_a_name_is_matched_as_the_page_shows_it_in_any_case():
    for typed in ("deu_Latn", "DEU_LATN", "German", "german", "German (Latin)",
                  "german (latin) (deu_latn)", "  German  (Latin) "):
        assert matching(typed, list(NLLB)) == ["deu_Latn"], typed
    assert matching("Arabic", list(NLLB)) == ["arb_Arab", "arb_Latn"]  # ambiguous
    assert matching("Arabic (Latin)", list(NLLB)) == ["arb_Latn"]
    assert matching("Klingon", list(NLLB)) == []


def test_a_model_of_language_codes_resolves_names_on_both_sides():
    resolved = nllb().resolve("German", "english")
    assert (resolved.target, resolved.source) == ("deu_Latn", "eng_Latn")
    assert nllb().resolve("french (latin)", "ENG_LATN").target == "fra_Latn"
    with pytest.raises(LanguageError) as refused:
        nllb().resolve("Arabic", "eng_Latn")
    assert refused.value.side == "target"
    assert refused.value.worded("--target-lang") == (
        "--target-lang Arabic: the name of 2 of this model's languages: Arabic (Arabic) "
        "(arb_Arab), Arabic (Latin) (arb_Latn); give one of them")
    with pytest.raises(LanguageError) as refused:
        nllb().resolve("German", "Klingon")
    assert refused.value.worded("source_lang").startswith(
        "source_lang Klingon: not a language code of this model")


def test_a_model_of_tags_resolves_a_target_s_name_and_reads_a_source_s():
    assert tagged().resolve("French").target == "fr"
    assert tagged().resolve("DE").target == "de"
    with pytest.raises(LanguageError, match="target language Italian: the model has no"):
        tagged().resolve("Italian")
    # The source is not checked against the model (its rules cut sentences): a name is read
    # as its language's code, among the model's sources first.
    assert tagged().resolve("fr", "German").source == "de"
    assert tagged(("ces", "deu", "eng")).resolve("fr", "german").source == "deu"
    assert tagged().resolve("fr", "Klingon").source == "Klingon"
    assert tagged(("cs", "de", "en")).source_languages == ["cs", "de", "en"]
    assert tagged().source_languages == ["en"]
    assert nllb().source_languages == list(NLLB)


def test_the_command_line_takes_a_language_s_name(tmp_path):
    from conftest import tfm
    from test_bad_inputs import refused
    from test_serve import write_tiny_model

    model = str(write_tiny_model(tmp_path / "m", (">>de<<", ">>fr<<", ">>it<<")))
    by_code = tfm("translate", "--model", model, "--target-lang", "fr", "A dog runs.")
    by_name = tfm("translate", "--model", model, "--target-lang", "FRENCH", "A dog runs.")
    assert by_code.returncode == 0, by_code.stderr
    assert by_name.stdout == by_code.stdout and by_name.returncode == 0
    refused(tfm("translate", "--model", model, "--target-lang", "Klingon", "A dog runs."), 2,
            "--target-lang Klingon: the model has no >>Klingon<< token; it has de, fr, it")
