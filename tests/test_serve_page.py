"""The page at ``/`` of ``tfm serve``, driven in a real headless Chromium (Debian's package,
through Playwright): a user types or pastes text and reads its translation.

Skips, saying why, only where no Chromium is installed (``apt-get install chromium``).
"""

from __future__ import annotations

import io
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import local_http
import pytest
from test_serve import PAIRS, serving, write_tiny_model

from tfm.decoding.translator import Translator
from tfm.serve.config import ServeConfig

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
KEY = "page-key-77"
TAGS = (">>de<<", ">>fr<<", ">>it<<")  # the multilingual model's target languages

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium to drive the page: apt-get install -y chromium")


@pytest.fixture(scope="module")
def translator(tmp_path_factory: pytest.TempPathFactory) -> Translator:
    from tfm.decoding.engines import load_translator

    return load_translator(write_tiny_model(tmp_path_factory.mktemp("page") / "model"), "cpu")


@pytest.fixture(scope="module", params=[None, "decoder_token"])
def multilingual(request, tmp_path_factory: pytest.TempPathFactory) -> Translator:
    """A multilingual model of the tags before the source, or as the decoder's first token
    (`tfm prepare --language-token decoder`): the page is the same for both."""
    from tfm.decoding.engines import load_translator

    return load_translator(write_tiny_model(tmp_path_factory.mktemp("page") / "model", TAGS,
                                            request.param), "cpu")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


def open_page(browser, url: str, requests: list[str] | None = None,
              posts: list[Any] | None = None):
    """A new page at ``url`` (its browser's language English); the URL of every request it
    makes goes to ``requests``; of every POST, the JSON body (or the URL and the body, where
    it is not JSON) to ``posts``."""
    page = browser.new_page(locale="en-US", accept_downloads=True)
    if requests is not None:
        page.on("request", lambda request: requests.append(request.url))
    if posts is not None:
        page.on("request", lambda request: posts.append(_posted(request))
                if request.method == "POST" else None)
    page.goto(url)
    return page


def _posted(request) -> Any:
    if "json" in (request.headers.get("content-type") or ""):
        return request.post_data_json
    return (request.url, request.post_data)


def translate_in_page(page, text: str, keys: str | None = None) -> str:
    """Type ``text``, press the button (or ``keys``), wait for the answer, return what the
    translation box shows. (The button is disabled while a request is out. Waiting is done
    by locators: the page's Content-Security-Policy forbids the eval that
    wait_for_function needs.)"""
    from playwright.sync_api import expect

    page.fill("#source", text)
    if keys:
        page.press("#source", keys)
    else:
        page.click("#translate")
    expect(page.locator("#translate")).to_be_enabled()
    return page.input_value("#target")


def expected(translator: Translator, text: str) -> str:
    return translator.translate([text], translator.default_options())[0].text


def direction(page) -> tuple[str, str, str]:
    """What the page says it translates: its title's languages, the source's and the
    translation's."""
    return (page.inner_text("#languages"), page.inner_text("#src-lang"),
            page.inner_text("#tgt-lang"))


def test_typing_a_sentence_shows_its_translation(browser, translator: Translator):
    from tfm.serve.app import create_app

    sentence = PAIRS[0][0]
    with serving(create_app(translator, ServeConfig())) as url:
        requests: list[str] = []
        posts: list[Any] = []
        page = open_page(browser, url + "/", requests, posts)
        # A model of one direction: its languages, and nothing to choose.
        assert direction(page) == ("English (en) → German (de)", "(en)", "(de)")
        assert page.is_hidden("#target-box")
        assert page.is_hidden("#key-box")
        assert translate_in_page(page, sentence) == expected(translator, sentence)
        assert posts == [{"text": sentence}]
        assert page.inner_text("#status").endswith(" s")
        # Ctrl+Enter translates too, and a pasted paragraph keeps its line breaks.
        second = PAIRS[1][0]
        assert translate_in_page(page, f"{sentence}\n\n{second}", "Control+Enter") == \
            f"{expected(translator, sentence)}\n\n{expected(translator, second)}"
        assert all(u.startswith(url) for u in requests), requests  # nothing from elsewhere
        page.close()


def test_with_an_api_key_the_page_asks_for_it(browser, translator: Translator):
    from tfm.serve.app import create_app

    sentence = PAIRS[2][0]
    with serving(create_app(translator, ServeConfig(api_key=KEY))) as url:
        page = open_page(browser, url + "/")
        assert page.is_visible("#key-box")
        assert translate_in_page(page, sentence) == ""
        assert "API key" in page.inner_text("#status")  # the server's 401, shown
        page.fill("#api-key", KEY)
        assert translate_in_page(page, sentence) == expected(translator, sentence)
        page.close()


def answer(url: str, text: str, lang: str) -> str:
    """What POST /v1/translate answers for ``text`` into ``lang``."""
    response = local_http.post(f"{url}/v1/translate", json={"text": text, "target_lang": lang})
    assert response.status_code == 200, response.text
    return response.json()["translations"][0]["text"]


def unalike(url: str) -> tuple[str, dict[str, str]]:
    """A sentence that the model (random weights) translates into German and French unalike,
    so that the page's translation shows which it asked for; and those translations."""
    for sentence, _ in PAIRS:
        into = {lang: answer(url, sentence, lang) for lang in ("de", "fr")}
        if into["de"] != into["fr"] and all(into.values()):
            return sentence, into
    raise AssertionError("no sentence translates into German and French unalike")


def test_a_multilingual_models_page_translates_into_the_language_chosen(
        browser, multilingual: Translator):
    from tfm.serve.app import create_app

    with serving(create_app(multilingual, ServeConfig())) as url:
        info = local_http.get(f"{url}/v1/info").json()
        assert info["target_languages"] == ["de", "fr", "it"]  # language_tokens' codes
        assert info["language_tokens"] == list(TAGS)
        sentence, into = unalike(url)
        posts: list[Any] = []
        page = open_page(browser, url + "/", posts=posts)
        options = page.locator("#target-langs option")
        assert [(options.nth(i).get_attribute("value"), options.nth(i).get_attribute("label"))
                for i in range(options.count())] == [
            ("de", "German"), ("fr", "French"), ("it", "Italian")]
        assert page.is_visible("#target-lang")
        # Nothing chosen yet: the page asks for a language instead of sending the request.
        assert direction(page) == ("English (en) → ?", "(en)", "(?)")
        assert translate_in_page(page, sentence) == ""
        assert "choose the language" in page.inner_text("#status") and posts == []
        page.fill("#target-lang", "fr")
        assert direction(page) == ("English (en) → French (fr)", "(en)", "(fr)")
        assert translate_in_page(page, sentence) == into["fr"]
        assert posts == [{"text": sentence, "target_lang": "fr"}]
        # The choice is remembered; a language's name chooses it too.
        page.reload()
        assert page.input_value("#target-lang") == "fr"
        assert direction(page)[0] == "English (en) → French (fr)"
        page.fill("#target-lang", "german")
        assert translate_in_page(page, sentence) == into["de"]
        assert posts[-1] == {"text": sentence, "target_lang": "de"}
        assert direction(page)[2] == "(de)"
        page.fill("#target-lang", "klingon")
        assert translate_in_page(page, sentence) == ""
        assert "klingon is not one of this model's 3 target languages" in page.inner_text(
            "#status")
        page.close()


def test_the_page_file_ships_inside_the_package():
    import tfm.serve

    assert (Path(tfm.serve.__file__).parent / "page.html").is_file()


def test_a_file_opened_on_the_page_is_translated_and_offered_as_a_file(
        browser, translator: Translator, tmp_path: Path):
    from playwright.sync_api import expect

    from tfm.serve.app import create_app

    first, second = PAIRS[0][0], PAIRS[1][0]
    document = f"{first}\n\n{second}\n"
    with serving(create_app(translator, ServeConfig())) as url:
        posts: list[Any] = []
        page = open_page(browser, url + "/", posts=posts)
        formats = page.locator("#format option")
        assert "html" in [formats.nth(i).get_attribute("value") for i in range(formats.count())]
        page.set_input_files("#file", files=[{"name": "notes.txt", "mimeType": "text/plain",
                                              "buffer": document.encode()}])
        expect(page.locator("#source")).to_have_value(document)
        assert page.input_value("#format") == "text"
        page.click("#translate")
        expect(page.locator("#download")).to_be_visible()
        assert page.input_value("#target") == \
            f"{expected(translator, first)}\n\n{expected(translator, second)}\n"
        # The file goes to /v1/document; what downloads is the server's answer, byte for byte.
        ((posted, body),) = [p for p in posts if isinstance(p, tuple)]
        assert posted.startswith(f"{url}/v1/document?filename=notes.txt&format=text&progress=")
        assert body == document
        direct = local_http.post(f"{url}/v1/document", params={"filename": "notes.txt"},
                                 content=document.encode())
        saved = download(page, tmp_path)
        assert (saved.name, saved.read_bytes()) == ("notes.de.txt", direct.content)
        page.set_input_files("#file", files=[{"name": "page.html", "mimeType": "text/html",
                                              "buffer": b"<p>x</p>"}])
        expect(page.locator("#format")).to_have_value("html")
        assert page.is_hidden("#download")
        page.close()


def download(page, directory: Path) -> Path:
    """Click the page's download link; the file it saves, under the name it gives."""
    with page.expect_download() as started:
        page.click("#download")
    saved = directory / started.value.suggested_filename
    started.value.save_as(saved)
    return saved


def drop(page, name: str, text: str, kind: str) -> None:
    """Drop a file named ``name`` holding ``text`` on the source pane, as a person does."""
    transfer = page.evaluate_handle(
        "([name, text, kind]) => { const t = new DataTransfer(); "
        "t.items.add(new File([text], name, {type: kind})); return t; }", [name, text, kind])
    page.dispatch_event("#source", "drop", {"dataTransfer": transfer})


HTML = ("<!doctype html><html><head><title>Garden</title>"
        "<style>h1 {{ color: #1565c0; }}</style></head><body>"
        "<h1>{0}</h1><p>{1} <b>{2}</b></p>"
        "<script>document.body.setAttribute('data-ran', '1'); "
        "parent.document.body.setAttribute('data-reached', '1');</script>"
        "</body></html>")


def test_a_dropped_html_file_is_translated_shown_rendered_in_a_closed_frame_and_downloaded(
        browser, translator: Translator, tmp_path: Path):
    from playwright.sync_api import expect

    from tfm.serve.app import create_app

    html = HTML.format(PAIRS[0][0], PAIRS[1][0], PAIRS[2][0])
    with serving(create_app(translator, ServeConfig())) as url:
        page = open_page(browser, url + "/")
        drop(page, "garden.html", html, "text/html")
        expect(page.locator("#source")).to_have_value(html)
        assert page.input_value("#format") == "html"
        page.click("#translate")
        expect(page.locator("#download")).to_be_visible()
        translation = page.input_value("#target")
        direct = local_http.post(f"{url}/v1/document", params={"filename": "garden.html"},
                                 content=html.encode())
        assert translation.encode() == direct.content
        saved = download(page, tmp_path)
        assert (saved.name, saved.read_bytes()) == ("garden.de.html", direct.content)
        # Rendered in a frame of no rights: its srcdoc, no script run, this page untouched.
        frame = page.locator("#preview")
        expect(frame).to_be_visible()
        assert frame.get_attribute("sandbox") == ""
        assert frame.get_attribute("srcdoc") == translation
        inside = page.frame_locator("#preview")
        expect(inside.locator("h1")).to_have_text(expected(translator, PAIRS[0][0]))
        assert inside.locator("b").count() == 1
        assert inside.locator("body").get_attribute("data-ran") is None
        assert page.locator("body").get_attribute("data-reached") is None
        assert page.locator("#target-box h1, .panes h1, .panes b").count() == 0
        page.close()


def test_a_markdown_file_s_translation_is_rendered_by_the_server(browser,
                                                                 translator: Translator):
    from playwright.sync_api import expect

    from tfm.serve.app import create_app

    markdown = f"# {PAIRS[0][0]}\n\n{PAIRS[1][0]} *{PAIRS[2][0]}*\n\n<img src=x onerror=y>\n"
    with serving(create_app(translator, ServeConfig())) as url:
        page = open_page(browser, url + "/")
        page.set_input_files("#file", files=[{"name": "README.md", "mimeType": "text/markdown",
                                              "buffer": markdown.encode()}])
        expect(page.locator("#source")).to_have_value(markdown)
        page.click("#translate")
        expect(page.locator("#preview")).to_be_visible()
        inside = page.frame_locator("#preview")
        expect(inside.locator("h1")).to_have_text(expected(translator, PAIRS[0][0]))
        assert inside.locator("em").count() == 1
        assert inside.locator("img").count() == 0  # raw HTML is shown as text, not made
        # Plain text shows no frame.
        page.select_option("#format", "text")
        assert page.is_hidden("#preview")
        page.close()


def test_a_word_file_is_sent_as_bytes_downloaded_and_previewed_in_the_closed_frame(
        browser, translator: Translator, tmp_path: Path):
    from playwright.sync_api import expect
    from test_serve_documents import word_file

    from tfm.serve.app import create_app

    data = word_file()
    with serving(create_app(translator, ServeConfig())) as url:
        posts: list[Any] = []
        page = open_page(browser, url + "/", posts=posts)
        page.set_input_files("#file", files=[{"name": "report.docx", "buffer": data,
                                              "mimeType": "application/octet-stream"}])
        expect(page.locator("#format")).to_have_value("docx")
        assert page.get_attribute("#source", "readonly") is not None  # it only names the file
        page.click("#translate")
        expect(page.locator("#download")).to_be_visible()
        # The bytes went to /v1/document as they were; the download is the server's answer
        # (its words: a zip's members carry the time they were written).
        saved = download(page, tmp_path)
        direct = local_http.post(f"{url}/v1/document", params={"filename": "report.docx"},
                                 content=data)
        assert saved.name == "report.de.docx"
        words = [zipfile.ZipFile(io.BytesIO(d)).read("word/document.xml")
                 for d in (saved.read_bytes(), direct.content)]
        assert words[0] == words[1]
        assert [p[0].split("?")[0] for p in posts if isinstance(p, tuple)] == [
            f"{url}/v1/document", f"{url}/v1/preview"]
        # Shown by the server's HTML, in the frame of no rights.
        frame = page.locator("#preview")
        expect(frame).to_be_visible()
        assert frame.get_attribute("sandbox") == ""
        inside = page.frame_locator("#preview")
        expect(inside.locator("table tr")).to_have_count(2)
        assert inside.locator("h1").count() == 1 and inside.locator("script").count() == 0
        assert inside.locator("a[href^='javascript']").count() == 0
        # Another format chosen: the Word file is forgotten, the source is text again.
        page.select_option("#format", "text")
        assert page.is_hidden("#preview") and page.input_value("#source") == ""
        assert page.get_attribute("#source", "readonly") is None
        page.close()


def test_the_page_names_the_source_language_identified_or_unknown(browser, tmp_path: Path):
    from tfm.decoding.engines import load_translator
    from tfm.serve.app import create_app

    pytest.importorskip("py3langid")
    # A model of tags into de, fr, it from three sources: cs, de, en.
    model = write_tiny_model(tmp_path / "m", TAGS, None, ("cs-fr", "de-fr", "en-fr", "en-it"))
    with serving(create_app(load_translator(model, "cpu"), ServeConfig())) as url:
        posts: list[Any] = []
        page = open_page(browser, url + "/", posts=posts)
        assert page.is_visible("#source-choice")
        assert page.get_attribute("#source-choice", "placeholder") == "identify"
        page.fill("#target-lang", "French")  # a name, as the hint says
        assert direction(page) == ("(identified) → French (fr)", "(identified from the text)",
                                   "(fr)")
        translate_in_page(page, "Der Hund schläft im Garten. Meine Schwester kauft Brot.")
        assert posts[-1]["target_lang"] == "fr" and "source_lang" not in posts[-1]
        assert direction(page) == ("German (de) → French (fr)", "(de, identified)", "(fr)")
        translate_in_page(page, "1234 5678")
        assert direction(page)[:2] == ("unknown → French (fr)", "(unknown: not identified)")
        page.fill("#source-choice", "czech")  # picked by the person
        translate_in_page(page, "Der Hund schläft.")
        assert posts[-1]["source_lang"] == "cs"
        assert direction(page)[:2] == ("Czech (cs) → French (fr)", "(cs)")
        page.fill("#source-choice", "Klingon")
        translate_in_page(page, "Der Hund schläft.")
        assert "Klingon is not one of this model's 3 source languages" in page.inner_text(
            "#status")
        page.close()


def test_an_nllb_model_s_languages_are_typed_by_the_names_the_page_shows(
        browser, tmp_path: Path):
    from test_import_m2m100 import build, sentencepiece_model

    from tfm.decoding.engines import load_translator
    from tfm.interop.m2m100_import import import_m2m100
    from tfm.serve.app import create_app

    build(tmp_path / "hf", sentencepiece_model(), "nllb")  # NLLB-200's layout, 202 codes
    nllb = load_translator(import_m2m100(tmp_path / "hf", tmp_path / "tfm"), "cpu")
    with serving(create_app(nllb, ServeConfig())) as url:
        posts: list[Any] = []
        page = open_page(browser, url + "/", posts=posts)
        page.fill("#target-lang", "German")
        page.fill("#source-choice", "english (latin)")
        assert direction(page) == ("English (Latin) (eng_Latn) → German (Latin) (deu_Latn)",
                                   "(eng_Latn)", "(deu_Latn)")
        translate_in_page(page, "A dog sleeps.")
        assert page.get_attribute("#status", "class") != "error", page.inner_text("#status")
        assert posts[-1] == {"text": "A dog sleeps.", "target_lang": "deu_Latn",
                             "source_lang": "eng_Latn"}
        # A name of several scripts is refused, naming them; the server refuses it alike.
        page.fill("#target-lang", "Chinese")
        translate_in_page(page, "A dog sleeps.")
        assert "Chinese is the name of 2 of this model's languages: Chinese (Simplified) " \
            "(zho_Hans), Chinese (Traditional) (zho_Hant); choose one" in page.inner_text(
                "#status")
        refused = local_http.post(f"{url}/v1/translate", json={
            "text": "x", "target_lang": "chinese", "source_lang": "eng_Latn"})
        assert refused.status_code == 422 and "zho_Hans" in refused.json()["error"]
        page.close()


def test_a_long_document_shows_its_sentences_done_while_it_is_translated(
        browser, translator: Translator, monkeypatch: pytest.MonkeyPatch):
    import re
    import time

    from playwright.sync_api import expect

    from tfm.serve.app import create_app

    decode = translator.translate_prepared

    def slowly(*args, **kwargs):  # a batch takes long enough for the page to count it
        time.sleep(0.4)
        return decode(*args, **kwargs)

    monkeypatch.setattr(translator, "translate_prepared", slowly)
    document = "".join(f"{source}\n" for source, _ in PAIRS[:6])
    # A batch of one sentence at a time (the tiny model's sentences are 8 to 20 tokens).
    with serving(create_app(translator, ServeConfig(max_batch_tokens=80, beam=4))) as url:
        page = open_page(browser, url + "/")
        page.set_input_files("#file", files=[{"name": "long.txt", "mimeType": "text/plain",
                                              "buffer": document.encode()}])
        expect(page.locator("#source")).to_have_value(document)
        page.click("#translate")
        expect(page.locator("#status")).to_have_text(
            re.compile(r"Translating… [0-5] / 6 sentences"))
        expect(page.locator("#download")).to_be_visible(timeout=60_000)
        assert page.inner_text("#status").endswith(" s")
        page.close()
