"""Specifications of documents on the server: ``POST /v1/document`` (a file in, the translated
file out) and ``/v1/translate``'s ``format``, through the same batcher, limits and one-line
errors as texts. The server runs in a thread (uvicorn) over a tiny model of random weights."""

from __future__ import annotations

from collections.abc import Iterator

import local_http
import pytest
from test_serve import serving, write_tiny_model

from tfm.data.sentences import split_sentences
from tfm.decoding.engines import load_translator
from tfm.decoding.translator import Translator
from tfm.documents.formats import FORMATS, Format
from tfm.serve.app import create_app
from tfm.serve.config import ServeConfig

DOCUMENT = "The dog sleeps. The cat eats.\r\n\n  A bird sings.\n"


@pytest.fixture(scope="module")
def translator(tmp_path_factory: pytest.TempPathFactory) -> Translator:
    return load_translator(write_tiny_model(tmp_path_factory.mktemp("docs") / "m"), "cpu")


@pytest.fixture(scope="module")
def url(translator: Translator) -> Iterator[str]:
    config = ServeConfig(max_request_bytes=2000, max_sentences=8)
    with serving(create_app(translator, config)) as running:
        yield running


def expected(translator: Translator, text: str) -> str:
    """``text`` translated as the command line translates a line: sentence by sentence."""
    passage = split_sentences(text)
    results = translator.translate(passage.sentences, translator.default_options())
    return passage.join([r.text for r in results])


def upload(url: str, data: bytes, **params: str):
    return local_http.post(f"{url}/v1/document", content=data, params=params, timeout=60)


def assert_refused(response, status: int, *fragments: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert "\n" not in error
    for fragment in fragments:
        assert fragment in error, error


def test_a_file_comes_back_translated_in_its_format(url: str, translator: Translator):
    response = upload(url, DOCUMENT.encode(), filename="notes.txt")
    assert response.status_code == 200, response.text
    lines = DOCUMENT.split("\n")
    want = "\n".join(expected(translator, line) if line.strip() else line for line in lines)
    assert response.content == want.encode()
    assert response.content.count(b"\r\n") == 1 and response.content.endswith(b"\n")
    assert response.headers["content-type"].startswith("text/plain")
    # Named after the model's target language (a model of several: the one asked for).
    assert 'filename="notes.de.txt"' in response.headers["content-disposition"]


def test_a_file_s_format_may_be_named(url: str):
    response = upload(url, b"One dog.\n", format="text", filename="../../etc/x y")
    assert response.status_code == 200, response.text
    assert 'filename="x_y.de.txt"' in response.headers["content-disposition"]


def test_bad_files_are_refused_in_one_line(url: str):
    assert_refused(upload(url, b"x", filename="a.pdf"), 415, ".pdf", "html", "docx")
    assert_refused(upload(url, b"\x89PNG\r\n\x1a\n\x00\x00", filename="a.txt"), 422,
                   "invalid text document", "NUL byte")
    assert_refused(upload(url, b"x" * 3000, filename="a.txt"), 413, "2000 bytes")
    many = "".join(f"Sentence {i}.\n" for i in range(9)).encode()
    assert_refused(upload(url, many, filename="a.txt"), 413, "9 sentences")
    assert_refused(upload(url, b"x", filename="a.txt", beam="0"), 422, "invalid request")


def test_translate_takes_a_format_and_refuses_one_it_cannot_put_in_json(
        url: str, translator: Translator, monkeypatch: pytest.MonkeyPatch):
    # A format of another module, as html or markdown will be: here plain text under a name.
    shout = Format("shout", (".shout",), "text")
    monkeypatch.setattr("tfm.documents.formats.FORMATS", (*FORMATS, shout))
    monkeypatch.setattr("tfm.serve.schema.FORMATS", (*FORMATS, shout))
    text = "The dog sleeps. The cat eats.\n\n  A bird sings."
    response = local_http.post(f"{url}/v1/translate", json={"text": [text], "format": "shout"},
                               timeout=60)
    assert response.status_code == 200, response.text
    (answer,) = response.json()["translations"]
    assert answer["text"] == "\n".join(expected(translator, line) if line.strip() else line
                                       for line in text.split("\n"))
    docx = local_http.post(f"{url}/v1/translate", json={"text": "x", "format": "docx"},
                           timeout=60)
    assert docx.status_code == 422 and "docx" in docx.text
    constrained = local_http.post(f"{url}/v1/translate", json={
        "text": "x", "format": "shout", "constraints": ["Hund"]}, timeout=60)
    assert_refused(constrained, 422, "constraints")


def test_the_file_s_name_is_the_upload_s_with_the_target_language():
    from tfm.serve.app import download_name

    text = FORMATS[0]
    assert download_name("page.txt", text, "de") == "page.de.txt"
    assert download_name(None, text, ">>fr<<") == "document.fr.txt"
    assert download_name("C:\\docs\\a b.txt", text, None) == "a_b.translated.txt"



def test_the_page_is_told_the_formats_a_text_can_hold(url: str):
    page = local_http.get(f"{url}/").text
    assert '"formats": [{"name": "text", "extensions": [".txt", ".text"]}' in page
    assert '"name": "html"' in page and '"name": "docx"' not in page
    assert 'id="file"' in page and 'id="download"' in page


def test_a_document_s_progress_is_counted_under_the_client_s_id(url: str):
    from types import SimpleNamespace

    from tfm.serve.progress import Progress

    ident = "page-0123456789"
    response = upload(url, DOCUMENT.encode(), filename="notes.txt", progress=ident)
    assert response.status_code == 200, response.text
    # Counted only while the document is out: afterwards nothing is kept.
    gone = local_http.get(f"{url}/v1/document/{ident}/progress")
    assert_refused(gone, 404, ident, "no document is being translated")
    assert_refused(upload(url, b"x", filename="a.txt", progress="no/way"), 422, "progress")
    # While out: the sentences done of the total, over every batcher job of the document.
    progress = Progress()
    jobs = [SimpleNamespace(sentences=["a", "b", "c"], remaining=1, done=False),
            SimpleNamespace(sentences=["d"], remaining=1, done=True)]  # answered
    with progress.watching(ident, jobs):  # type: ignore[arg-type]
        assert progress.count(ident) == {"done": 3, "total": 4}
        with pytest.raises(Exception, match="counting another document"):
            progress.check(ident)
    with pytest.raises(Exception, match="no document"):
        progress.count(ident)


def test_markdown_is_rendered_for_the_page_with_raw_html_escaped(url: str):
    response = local_http.post(f"{url}/v1/preview", params={"format": "markdown"},
                               content=b"# Title\n\nA *dog* <script>alert(1)</script>\n\n"
                               b"| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert response.status_code == 200, response.text
    html = response.text
    assert "<h1>Title</h1>" in html and "<em>dog</em>" in html and "<td>2</td>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert local_http.post(f"{url}/v1/preview", params={"format": "html"},
                           content=b"x").status_code == 415


def test_a_page_names_the_model_s_target_language(url: str, translator: Translator):
    page = b'<html lang="en"><body><p>The dog sleeps.</p></body></html>'
    response = upload(url, page, filename="page.html")
    assert response.status_code == 200, response.text
    assert f'<html lang="{translator.info.tgt_lang}">'.encode() in response.content
