"""Text normalisation applied to every sentence before tokenization, in ``prepare`` and in
decoding alike, so that a model sees the same kind of text when it translates as when it
learnt. Not for the SentencePiece segmenter of an imported MarianMT model, which normalises on
its own as MarianTokenizer leaves it to (tfm.data.tokenizer.text_normalizer)."""

from __future__ import annotations

import re
import sys

_WHITESPACE = re.compile(r"\s+")
# Invisible characters that carry no text: C0/C1 control characters (NUL among them) that are
# not whitespace, zero-width space and a byte-order mark inside a line. Zero-width (non-)joiners
# are kept: Persian, Indic scripts and emoji sequences need them.
_INVISIBLE = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u200b\ufeff]")
# Lone UTF-16 surrogates: not characters, yet a Python string can hold them (JSON's "\ud800"
# escape decodes to one); no UTF-8 encoder or tokenizer takes them.
_SURROGATES = re.compile("[\ud800-\udfff]")


def normalize_text(text: str) -> str:
    """Invisible control characters are removed; whitespace runs (tabs, non-breaking spaces,
    ...) become one space; ends are stripped; lone surrogates become U+FFFD."""
    return _WHITESPACE.sub(" ", _INVISIBLE.sub("", replace_surrogates(text))).strip()


def replace_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, the replacement character, as a
    UTF-8 decoder replaces a byte it cannot read."""
    return _SURROGATES.sub("\ufffd", text)


def has_invisible(text: str) -> bool:
    """Whether ``normalize_text`` removes invisible characters from ``text``."""
    return _INVISIBLE.search(text) is not None


def removed_and_spaced_characters() -> tuple[list[int], list[int]]:
    """The code points ``normalize_text`` removes (the invisible ones) and those it turns into
    a space (whitespace), in order: what ``normalize_text(f"x{c}x")`` gives ``"xx"`` and
    ``"x x"`` for, found by its own patterns run once over every code point."""
    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    removed = [m.start() for m in _INVISIBLE.finditer(everything)]
    gone = set(removed)
    spaced = [code for m in _WHITESPACE.finditer(everything)
              for code in range(m.start(), m.end()) if code not in gone]
    return removed, spaced
