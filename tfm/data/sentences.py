"""A text cut into sentences, and the translations put back in its place.

A model translates one sentence at a time (it was trained on sentence pairs), but people give
it lines, paragraphs and pages. ``split_sentences`` cuts a text into its sentences with
sentencex (Wikimedia's multilingual segmenter: abbreviations and rules per language, a language
falling back along its chain to English's rules) and keeps everything between them (spaces,
line breaks, blank lines, indentation) verbatim, so that ``Passage.join`` rebuilds the text
with the translations in place of the sentences. A line break always ends a sentence: a
line's layout is the writer's, never the model's.

The command line (``tfm translate``, ``tfm eval``), the server and the documents' pipeline all
cut sentences here, so that a text is cut the same way wherever it is translated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Line breaks as str.splitlines() knows them (the translator's own list), \r\n as one.
_LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_LANGUAGE = re.compile(r"[A-Za-z]+")


@dataclass
class Passage:
    """A text cut into sentences: ``gaps[i]`` comes before ``sentences[i]`` and ``gaps[-1]``
    after the last, so that gaps and sentences interleaved give back the text exactly."""

    sentences: list[str]
    gaps: list[str]

    @classmethod
    def whole(cls, text: str) -> Passage:
        """The text as one sentence (``--no-split``: a corpus already one sentence a line)."""
        return cls([text], ["", ""])

    def join(self, translations: list[str]) -> str:
        """The text with each sentence replaced by its translation."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for "
                             f"{len(self.sentences)} sentences")
        parts = [gap + t for gap, t in zip(self.gaps, translations)]
        return "".join(parts) + self.gaps[-1]

    def starts(self) -> list[int]:
        """Where each sentence starts in the text."""
        starts, position = [], 0
        for gap, sentence in zip(self.gaps, self.sentences):
            position += len(gap)
            starts.append(position)
            position += len(sentence)
        return starts


def segmenter_language(language: str | None) -> str:
    """The code sentencex is given for a language as tfm's options and models name it
    (``de``, ``>>de<<``, ``deu_Latn``, ``pt-BR``): its first letters, lowercased; English's
    rules for none."""
    found = _LANGUAGE.search(language or "")
    return found.group().lower() if found else "en"


def split_sentences(text: str, language: str | None = None) -> Passage:
    """``text`` cut into sentences by the rules of ``language`` (None: English's); a line
    break always ends one, and whitespace-only text has none."""
    code = segmenter_language(language)
    sentences: list[str] = []
    gaps: list[str] = []
    gap = ""
    position = 0
    for match in [*_LINE_BREAK.finditer(text), None]:
        end = match.start() if match else len(text)
        for piece in _line_sentences(text[position:end], code):
            body = piece.strip()
            if not body:
                gap += piece
                continue
            lead = len(piece) - len(piece.lstrip())
            gaps.append(gap + piece[:lead])
            sentences.append(body)
            gap = piece[lead + len(body):]
        if match:
            gap += match.group()
            position = match.end()
    gaps.append(gap)
    return Passage(sentences, gaps)


def _line_sentences(line: str, code: str) -> list[str]:
    """The pieces of one line, sentence by sentence, whitespace included: together, the
    line (the line whole should the segmenter ever lose a character)."""
    if not line.strip():
        return [line]
    from sentencex import segment

    pieces = list(segment(code, line))
    return pieces if "".join(pieces) == line else [line]
