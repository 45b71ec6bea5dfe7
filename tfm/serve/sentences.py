"""Split a pasted text into sentences and put the translations back in its place.

A model translates one sentence at a time (it was trained on sentence pairs), but users paste
pages. ``split_sentences`` cuts a text into its sentences and keeps everything between them
(spaces, line breaks, blank lines) verbatim, so that ``Passage.join`` rebuilds the text with the
translations in place of the sentences: paragraphs and line breaks survive the round trip.

The rules are deliberately simple and predictable: a line break always ends a sentence; within
a line a sentence ends at ``.``, ``!``, ``?`` or ``…`` (with any closing quotes or brackets)
followed by whitespace and a character that is not a lowercase letter, unless the word before
the full stop is a common abbreviation or a single capital letter (an initial); ``。！？`` end a
sentence wherever they stand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Line breaks as str.splitlines() knows them (the translator's own list), \r\n as one.
_LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_CLOSERS = "\"'”’»)\\]"
# A candidate end of sentence: terminal punctuation, closers, then the whitespace that follows
# (group "gap"), or CJK terminal punctuation with optional whitespace.
_END = re.compile(rf"(?:[.!?…]+[{_CLOSERS}]*(?P<gap>\s+)(?=\S))"
                  rf"|(?:[。！？]+[{_CLOSERS}]*(?P<cjk_gap>\s*)(?=\S))")
_WORD_BEFORE = re.compile(r"(\S*)$")
# Words that a full stop follows without ending the sentence (lowercased, without the stop).
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "e.g", "i.e", "cf", "approx",
    "z.b", "bzw", "ca", "nr", "hr", "str", "u.a", "d.h", "mme", "mlle", "sra",
})


@dataclass
class Passage:
    """A text cut into sentences: ``gaps[i]`` comes before ``sentences[i]`` and ``gaps[-1]``
    after the last, so that gaps and sentences interleaved give back the text exactly."""

    sentences: list[str]
    gaps: list[str]

    @classmethod
    def whole(cls, text: str) -> Passage:
        """The text as one sentence (as ``tfm translate`` takes each line)."""
        return cls([text], ["", ""])

    def join(self, translations: list[str]) -> str:
        """The text with each sentence replaced by its translation."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for "
                             f"{len(self.sentences)} sentences")
        parts = [gap + t for gap, t in zip(self.gaps, translations)]
        return "".join(parts) + self.gaps[-1]


def split_sentences(text: str) -> Passage:
    """``text`` cut into sentences; whitespace-only text has none."""
    sentences: list[str] = []
    gaps: list[str] = []
    gap = ""
    position = 0
    for match in [*_LINE_BREAK.finditer(text), None]:
        end = match.start() if match else len(text)
        line = text[position:end]
        body = line.strip()
        if body:
            lead = len(line) - len(line.lstrip())
            gap += line[:lead]
            for sentence, after in _split_line(body):
                gaps.append(gap)
                sentences.append(sentence)
                gap = after
            gap += line[lead + len(body):]
        else:
            gap += line
        if match:
            gap += match.group()
            position = match.end()
    gaps.append(gap)
    return Passage(sentences, gaps)


def _split_line(line: str) -> list[tuple[str, str]]:
    """(sentence, whitespace after it) pairs of one stripped, non-empty line."""
    pieces = []
    start = 0
    for match in _END.finditer(line):
        gap = match.group("gap")
        if gap is not None and not _ends_sentence(line, match, gap):
            continue
        gap = gap if gap is not None else match.group("cjk_gap")
        stop = match.end() - len(gap)
        pieces.append((line[start:stop], gap))
        start = match.end()
    pieces.append((line[start:], ""))
    return pieces


def _ends_sentence(line: str, match: re.Match[str], gap: str) -> bool:
    """Whether a ``.!?…`` match ends a sentence (see the module's rules)."""
    following = line[match.end()]
    if following.islower():
        return False
    if line[match.start()] != ".":
        return True
    word = _WORD_BEFORE.search(line, 0, match.start()).group(1).lstrip("(\"'“‘«[")
    if len(word) == 1 and word.isupper():
        return False  # an initial: "J. Smith"
    return word.lower() not in ABBREVIATIONS
