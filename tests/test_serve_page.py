"""The page at ``/`` of ``tfm serve``, driven in a real headless Chromium (Debian's package,
through Playwright): a user types or pastes text and reads its translation.

Skips, saying why, only where no Chromium is installed (``apt-get install chromium``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_serve import PAIRS, serving, write_tiny_model

from tfm.decoding.translator import Translator
from tfm.serve.config import ServeConfig

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
KEY = "page-key-77"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium to drive the page: apt-get install -y chromium")


@pytest.fixture(scope="module")
def translator(tmp_path_factory: pytest.TempPathFactory) -> Translator:
    from tfm.decoding.engines import load_translator

    return load_translator(write_tiny_model(tmp_path_factory.mktemp("page") / "model"), "cpu")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


def open_page(browser, url: str, requests: list[str] | None = None):
    """A new page at ``url``; the URL of every request it makes goes to ``requests``."""
    page = browser.new_page()
    if requests is not None:
        page.on("request", lambda request: requests.append(request.url))
    page.goto(url)
    return page


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


def test_typing_a_sentence_shows_its_translation(browser, translator: Translator):
    from tfm.serve.app import create_app

    sentence = PAIRS[0][0]
    with serving(create_app(translator, ServeConfig())) as url:
        requests: list[str] = []
        page = open_page(browser, url + "/", requests)
        assert "English" in page.inner_text("#languages") or "en" in page.inner_text(
            "#languages")
        assert page.is_hidden("#key-box")
        assert translate_in_page(page, sentence) == expected(translator, sentence)
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


def test_the_page_file_ships_inside_the_package():
    import tfm.serve

    assert (Path(tfm.serve.__file__).parent / "page.html").is_file()
