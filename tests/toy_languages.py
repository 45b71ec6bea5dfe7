"""A toy multi-way corpus in three made-up languages, for the multilingual tests.

Each sentence is a few of ``CONCEPTS`` concepts; each language has its own word for every
concept (drawn once from its own letters) and its own word order: ``aa`` and ``bb`` keep the
concepts' order, ``cc`` reverses it. Line i of every language's file says the same thing, so
any two of them are a parallel corpus (as Multi30k's captions are in en, de, fr and cs), and a
translation is right exactly when it is the reference.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

LANGUAGES = ("aa", "bb", "cc")
CONCEPTS = 16
_LETTERS = {"aa": ("ptk", "aiu"), "bb": ("mnl", "eo"), "cc": ("sfz", "ay")}


@functools.cache  # drawn once: sentence() asks for it word by word
def lexicon(lang: str, seed: int = 0) -> tuple[str, ...]:
    """The language's word for each concept: two syllables of its own letters, all distinct."""
    consonants, vowels = _LETTERS[lang]
    rng = random.Random(f"{lang}-{seed}")
    words: list[str] = []
    while len(words) < CONCEPTS:
        word = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(2))
        if word not in words:
            words.append(word)
    return tuple(words)


def sentence(lang: str, concepts: list[int]) -> str:
    words = [lexicon(lang)[c] for c in concepts]
    return " ".join(reversed(words) if lang == "cc" else words)


def write_corpus(directory: Path, name: str, n: int, seed: int) -> Path:
    """``directory/name.{aa,bb,cc}``, n aligned sentences of 2 to 5 concepts; returns the
    prefix ``directory/name``."""
    rng = random.Random(seed)
    rows = [[rng.randrange(CONCEPTS) for _ in range(rng.randint(2, 5))] for _ in range(n)]
    directory.mkdir(parents=True, exist_ok=True)
    for lang in LANGUAGES:
        (directory / f"{name}.{lang}").write_text(
            "".join(sentence(lang, r) + "\n" for r in rows), encoding="utf-8")
    return directory / name
