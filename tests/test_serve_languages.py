"""Specifications of the server's languages: a request names them by code or by name (the
table the page shows: tfm.data.language_names), and an answer says which source language it
translated from and how that is known: given, identified among the model's source languages
(py3langid), the model's own, or unknown - never assumed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import local_http
import pytest
from test_serve import serving, write_tiny_model

from tfm.decoding.engines import load_translator
from tfm.serve.app import create_app
from tfm.serve.config import ServeConfig

pytest.importorskip("py3langid")

TAGS = (">>de<<", ">>fr<<", ">>it<<")
DIRECTIONS = ("cs-fr", "de-fr", "en-fr", "en-de", "en-it")
GERMAN = "Der Hund schläft im Garten. Meine Schwester kauft Brot auf dem Markt."


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # A model of tags whose directions have three source languages (cs, de, en).
    model = write_tiny_model(tmp_path_factory.mktemp("langs") / "m", TAGS, None, DIRECTIONS)
    with serving(create_app(load_translator(model, "cpu"), ServeConfig())) as running:
        yield running


def ask(url: str, **body) -> dict:
    response = local_http.post(f"{url}/v1/translate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_page_and_info_are_told_the_sources_and_the_names(url: str):
    info = local_http.get(f"{url}/v1/info").json()
    assert info["source_languages"] == ["cs", "de", "en"]
    assert info["language_names"] == {"cs": "Czech", "de": "German", "en": "English",
                                      "fr": "French", "it": "Italian"}


def test_the_source_language_is_identified_among_the_model_s_not_assumed(url: str):
    answer = ask(url, text=GERMAN, target_lang="fr")
    assert (answer["source_lang"], answer["source_lang_by"]) == ("de", "identified")
    czech = ask(url, text="Pes spí na zahradě a moje sestra kupuje chléb.", target_lang="fr")
    assert czech["source_lang"] == "cs"
    # Nothing to tell a language by: unknown, not the model's first language.
    numbers = ask(url, text="1234 5678", target_lang="fr")
    assert (numbers["source_lang"], numbers["source_lang_by"]) == (None, "unknown")
    given = ask(url, text=GERMAN, target_lang="fr", source_lang="english")
    assert (given["source_lang"], given["source_lang_by"]) == ("en", "request")
    # A document too: its words are identified, not its markup.
    html = ask(url, text=f"<p>{GERMAN}</p>", format="html", target_lang="fr")
    assert html["source_lang"] == "de"
    response = local_http.post(f"{url}/v1/document", content=GERMAN.encode(),
                               params={"filename": "a.txt", "target_lang": "French"},
                               timeout=60)
    assert response.headers["x-source-lang"] == "de"
    assert response.headers["x-source-lang-by"] == "identified"
    assert 'filename="a.fr.txt"' in response.headers["content-disposition"]
    odd = local_http.post(f"{url}/v1/document", content=GERMAN.encode(), timeout=60,
                          params={"filename": "a.txt", "target_lang": "fr",
                                  "source_lang": "Deutsch ✓\r\nX: y"})
    assert odd.status_code == 200 and odd.headers["x-source-lang"] == "Deutsch____X__y"



def test_a_language_s_name_is_taken_where_its_code_is(url: str):
    by_code = ask(url, text=GERMAN, target_lang="it", source_lang="de")
    assert ask(url, text=GERMAN, target_lang="Italian", source_lang="GERMAN") == by_code
    refused = local_http.post(f"{url}/v1/translate", json={"text": "x", "target_lang": "Klingon"})
    assert refused.status_code == 422
    assert refused.json()["error"].startswith("invalid request: target_lang Klingon: the model "
                                              "has no >>Klingon<< token; it has de, fr, it")


def test_a_model_of_one_source_language_names_it(tmp_path: Path):
    model = write_tiny_model(tmp_path / "m")
    with serving(create_app(load_translator(model, "cpu"), ServeConfig())) as url:
        answer = ask(url, text=GERMAN)
        assert (answer["source_lang"], answer["source_lang_by"]) == ("en", "model")
        assert "source_languages" not in local_http.get(f"{url}/v1/info").json()
