"""Specification of the one request path (tfm.decoding.requests): a request's sentences are
prepared by one function, and each result written as one JSON record, so that
``tfm translate --format jsonl`` and the server's ``/v1/translate`` answer the same request
alike, record for record: translation, score, n-best list, constraints report, truncation.

The model is a tiny one with fixed random weights (tests/test_serve.py): its translations are
arbitrary but deterministic, and constraints and prefixes are forced on them all the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import tfm
from test_serve import LONG, post, serving, write_tiny_model

from tfm.config import SearchOptions
from tfm.decoding.constraints import ConstraintError, ConstraintSpec
from tfm.decoding.glossary import Glossary, load_glossary
from tfm.decoding.requests import constraint_specs, prepare_request, translation_record
from tfm.decoding.translator import Translation
from tfm.errors import OptionError

# (sentence, constraint phrases, prefix): a glossary term (dog -> Hund), a phrase, a prefix,
# both with a glossary term, an empty line, a sentence too long for the model.
REQUESTS: list[tuple[str, list[str], str | None]] = [
    ("A dog runs through the snow .", [], None),
    ("The girl is eating an apple .", ["Apfel"], None),
    ("Two women are talking in the kitchen .", [], "Zwei Frauen"),
    ("The dog catches the ball .", ["Ball"], "Der"),
    ("A chef prepares food in the restaurant .", [], None),
    ("", [], None),
    (LONG, [], None),
]
GLOSSARY = "dog\tHund\nkitchen\tKüche\n"
TAGS = (">>de<<", ">>fr<<")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A bilingual model and a multilingual one (its tokenizer has >>de<< and >>fr<<)."""
    root = tmp_path_factory.mktemp("requests")
    return {"bilingual": write_tiny_model(root / "bilingual"),
            "multilingual": write_tiny_model(root / "multilingual", TAGS)}


def approx_floats(value: Any) -> Any:
    """``value`` with each float compared to 1e-4 (the server batches sentences otherwise)."""
    if isinstance(value, dict):
        return {k: approx_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [approx_floats(v) for v in value]
    return pytest.approx(value, abs=1e-4) if isinstance(value, float) else value


def command_line(model: Path, folder: Path, sentences: list[str], target_lang: str | None
                 ) -> list[dict[str, Any]]:
    """``tfm translate --format jsonl --n-best 2 --beam 3`` of REQUESTS as a jsonl input, with
    the glossary: one record a sentence."""
    requests = folder / "requests.jsonl"
    requests.write_text("".join(
        json.dumps({"src": s, "constraints": c, **({"prefix": p} if p else {})}) + "\n"
        for s, (_, c, p) in zip(sentences, REQUESTS)), encoding="utf-8")
    (folder / "terms.tsv").write_text(GLOSSARY, encoding="utf-8")
    result = tfm("translate", "-m", str(model), "--device", "cpu", "--format", "jsonl",
                 "--n-best", "2", "--beam", "3", "--glossary", str(folder / "terms.tsv"),
                 "--input", str(requests),
                 *(["--target-lang", target_lang] if target_lang else []))
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def server(model: Path, folder: Path, sentences: list[str], target_lang: str | None
           ) -> list[dict[str, Any]]:
    """The same request to /v1/translate of a server with the same glossary (``folder``'s):
    one answer a text."""
    from tfm.decoding.engines import load_translator
    from tfm.serve.app import create_app
    from tfm.serve.config import ServeConfig

    translator = load_translator(model, "cpu")
    glossary = load_glossary(folder / "terms.tsv")
    body = {"text": sentences, "constraints": [c for _, c, _ in REQUESTS],
            "prefix": [p for _, _, p in REQUESTS], "beam": 3, "n_best": 2, "split": False,
            **({"target_lang": target_lang} if target_lang else {})}
    with serving(create_app(translator, ServeConfig(max_wait_ms=0), glossary=glossary)) as url:
        response = post(url, body, key=None)
    assert response.status_code == 200, response.text
    return response.json()["translations"]


@pytest.fixture(scope="module")
def answered(models, tmp_path_factory: pytest.TempPathFactory):
    """(model, target_lang, own_tag) -> (the command line's records, the server's answers)
    of REQUESTS, each sentence after ``own_tag`` where one is given; each asked once."""
    done: dict[tuple[str, str | None, str | None], tuple[list, list]] = {}

    def answer(model: str, target_lang: str | None, own_tag: str | None) -> tuple[list, list]:
        key = (model, target_lang, own_tag)
        if key not in done:
            folder = tmp_path_factory.mktemp("request")
            sentences = [f"{own_tag} {s}" if own_tag and s else s for s, _, _ in REQUESTS]
            done[key] = (command_line(models[model], folder, sentences, target_lang),
                         server(models[model], folder, sentences, target_lang))
        return done[key]

    return answer


@pytest.mark.parametrize("model, target_lang, own_tag", [
    ("bilingual", None, None),
    ("multilingual", "fr", None),  # --target-lang and target_lang
    ("multilingual", None, ">>de<<"),  # each sentence with its own tag
])
def test_the_command_line_and_the_server_answer_a_request_alike(answered, model, target_lang,
                                                                own_tag):
    cli, answers = answered(model, target_lang, own_tag)
    assert len(cli) == len(answers) == len(REQUESTS)
    for record, answer in zip(cli, answers):
        (sentence,) = answer["sentences"]
        assert sentence == approx_floats(record)  # every field, the same value
        assert answer["text"] == record["translation"]
        assert answer["truncated"] == record["truncated"]
        assert answer.get("constraints") == record.get("constraints")
        assert answer.get("constraints_met") == record.get("constraints_met")
    # What the request asked shows in both: the glossary's term, the phrases, the prefixes,
    # two hypotheses each, the cut sentence.
    first, apple, women, ball, _, empty, long = cli
    assert first["constraints"] == [{"phrase": "Hund", "met": True, "source_term": "dog"}]
    assert apple["constraints"] == [{"phrase": "Apfel", "met": True}]
    assert women["translation"].startswith("Zwei Frauen") and women["constraints"] == [
        {"phrase": "Küche", "met": True, "source_term": "kitchen"}]
    assert ball["translation"].startswith("Der") and [c["phrase"] for c in ball[
        "constraints"]] == ["Ball", "Hund"]
    assert all(len(r["n_best"]) == 2 for r in cli if r["source"])
    assert empty["translation"] == "" and "constraints" not in empty
    assert long["truncated"] and not first["truncated"]


def test_each_side_translates_into_the_language_asked_for(answered):
    """French asked by target_lang (--target-lang) and German by each sentence's own tag: the
    model reads each sentence after the tag asked for, and the two languages' translations
    differ (the tag is the only difference in what the model reads), on both sides."""
    french, german = answered("multilingual", "fr", None), answered("multilingual", None,
                                                                    ">>de<<")
    for fr, de in zip(french, german):  # the command line's records, then the server's
        fr, de = [r.get("sentences", [r])[0] for r in fr], [r.get("sentences", [r])[0]
                                                            for r in de]
        for (sentence, _, _), fr_record, de_record in zip(REQUESTS, fr, de):
            if not sentence:
                continue
            assert fr_record["source"].startswith(">>fr<< ")
            assert de_record["source"].startswith(">>de<< ")
            assert fr_record["source"][len(">>fr<< "):] == de_record["source"][len(">>de<< "):]
            assert [(h["translation"], h["score"]) for h in fr_record["n_best"]] != [
                (h["translation"], h["score"]) for h in de_record["n_best"]]


def test_a_record_has_the_same_keys_on_both_sides_and_n_best_even_for_one():
    plain = translation_record(Translation("a", [("b", -0.5)]))
    assert plain == {"source": "a", "translation": "b", "score": -0.5, "truncated": False,
                     "n_best": [{"translation": "b", "score": -0.5}]}
    constrained = translation_record(Translation(
        "a", [("b", -0.5), ("c", -0.7)], constraints=[("b", True, "x")],
        hypotheses_met=[True, False], alignment=[(0, 0)]), alignment=True)
    assert constrained["constraints"] == [{"phrase": "b", "met": True, "source_term": "x"}]
    assert constrained["constraints_met"] is True
    assert [h["constraints_met"] for h in constrained["n_best"]] == [True, False]
    assert constrained["alignment"] == "0-0"


def test_glossary_terms_are_looked_for_in_the_sentence_not_in_its_tag():
    glossary = Glossary({"de": "von"})
    assert constraint_specs([">>de<< a b"], None, glossary) is None
    assert constraint_specs([">>de<< de facto"], None, glossary) == [
        ConstraintSpec([], None, [("de", "von")])]
    assert constraint_specs(["a", "b"], None, None) is None


def test_a_constraint_error_names_its_sentence_counted_from_the_first(models):
    from tfm.decoding.engines import load_translator

    translator = load_translator(models["bilingual"], "cpu")
    options = translator.default_options(beam=3)
    with pytest.raises(ConstraintError) as error:
        prepare_request(translator, ["a", "b"], options,
                        [None, ConstraintSpec([""])], first=5)
    assert error.value.sentence == 6 and error.value.field == "constraints[0]"



@pytest.mark.parametrize("options", [dict(beam=2, n_best=3), dict(beam=1, n_best=2)])
def test_a_bad_option_is_checked_once_and_worded_for_each_caller(options):
    """SearchOptions checks the option; the command line names its flag, the server its
    request's field (tfm.errors.OptionError): neither checks it again."""
    with pytest.raises(OptionError) as refused:
        SearchOptions(**options)
    assert str(refused.value).startswith("--n-best must be between 1 and the beam")
    assert refused.value.for_request().startswith("n_best must be between 1 and the beam")
