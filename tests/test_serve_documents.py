"""Specifications of documents on the server: ``POST /v1/document`` (a file in, the translated
file out) and ``/v1/translate``'s ``format``, through the same batcher, limits and one-line
errors as texts. The server runs in a thread (uvicorn) over a tiny model of random weights."""

from __future__ import annotations

import io
from collections.abc import Iterator

import html5lib
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


@pytest.fixture(scope="module")
def roomy(translator: Translator) -> Iterator[str]:
    """A server that takes a Word file (tens of kilobytes, most of it the package's styles)."""
    with serving(create_app(translator, ServeConfig(max_request_bytes=200_000))) as running:
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



def test_the_page_is_told_the_formats_and_which_are_sent_as_bytes(url: str):
    page = local_http.get(f"{url}/").text
    assert '"formats": [{"name": "text", "extensions": [".txt", ".text"]}' in page
    assert '"name": "html", "extensions": [".html", ".htm", ".xhtml"]}' in page
    assert '{"name": "docx", "extensions": [".docx"], "binary": true}' in page
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


def word_file() -> bytes:
    """A Word file with a heading, bold and italic runs, a link, a table, and what a preview
    must never let through: markup in its words, a javascript: link."""
    docx = pytest.importorskip("docx")
    from test_documents_docx import add_hyperlink

    document = docx.Document()
    document.add_heading("The garden", 1)
    paragraph = document.add_paragraph("The ")
    paragraph.add_run("dog").bold = True
    paragraph.add_run(" sleeps <script>alert(1)</script> in the ")
    add_hyperlink(paragraph, "https://example.org/garden", "garden", italic=True)
    add_hyperlink(paragraph, "javascript:alert(2)", "here")
    table = document.add_table(rows=2, cols=2)
    for row, (animal, place) in enumerate([("Animal", "Place"), ("A cat", "the roof")]):
        table.cell(row, 0).text = animal
        table.cell(row, 1).paragraphs[0].add_run(place).italic = row == 1
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_a_translated_word_file_is_previewed_as_html_made_by_the_server(roomy: str):
    translated = upload(roomy, word_file(), filename="report.docx")
    assert translated.status_code == 200, translated.text
    response = local_http.post(f"{roomy}/v1/preview", params={"format": "docx"},
                               content=translated.content)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    tree = html5lib.parse(response.text, namespaceHTMLElements=False)
    assert tree.find(".//h1") is not None and len(tree.findall(".//table/tbody/tr")) == 2
    assert [len(row.findall("td")) for row in tree.findall(".//tr")] == [2, 2]
    assert tree.find(".//p/b") is not None and tree.find(".//td//i") is not None
    # Only the safe link is a link; the words are words: no element of the file's own.
    assert [a.get("href") for a in tree.iter("a")] == ["https://example.org/garden"]
    assert tree.find(".//a/i") is not None
    assert not [e for e in tree.iter() if e.tag in ("script", "img", "iframe", "object")]


def test_the_preview_shows_the_words_of_the_file_it_is_given(roomy: str):
    response = local_http.post(f"{roomy}/v1/preview", params={"format": "docx"},
                               content=word_file())
    assert response.status_code == 200, response.text
    tree = html5lib.parse(response.text, namespaceHTMLElements=False)
    assert tree.find(".//h1").text == "The garden"
    paragraph = "".join(tree.find(".//p").itertext())
    assert paragraph == "The dog sleeps <script>alert(1)</script> in the gardenhere"
    cells = ["".join(td.itertext()) for td in tree.iter("td")]
    assert cells == ["Animal", "Place", "A cat", "the roof"]
    assert tree.find(".//td/p/i").text == "the roof"  # italic, in its cell's paragraph


def test_a_preview_of_what_is_not_a_word_file_is_refused_in_one_line(url: str):
    big = local_http.post(f"{url}/v1/preview", params={"format": "docx"}, content=word_file())
    assert_refused(big, 413, "limit of 2000 bytes")  # the server's limits, as for a document
    assert_refused(local_http.post(f"{url}/v1/preview", params={"format": "docx"},
                                   content=b"not a zip"), 422, "invalid docx document")
    assert_refused(local_http.post(f"{url}/v1/preview", params={"format": "pdf"},
                                   content=b"x"), 415, "markdown and docx")


def test_a_page_names_the_model_s_target_language(url: str, translator: Translator):
    page = b'<html lang="en"><body><p>The dog sleeps.</p></body></html>'
    response = upload(url, page, filename="page.html")
    assert response.status_code == 200, response.text
    assert f'<html lang="{translator.info.tgt_lang}">'.encode() in response.content
