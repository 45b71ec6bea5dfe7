"""Glossaries: source terms whose target terms a translation must use (docs/CONSTRAINTS.md).

A glossary is a TSV file, one entry a line: the source term, a tab, the target term. Blank
lines and lines starting with ``#`` are skipped. Terms are normalised as sentences are
(tfm.data.text.normalize_text) before they are matched.

Matching, for each source sentence:

* whole words only: a term matches where it is neither preceded nor followed by a letter,
  digit or underscore ("cat" matches "a cat." and "cat's", not "cats" or "concat");
* case: a term written all in lower case matches in any case ("bicycle" matches "Bicycle"
  and "BICYCLE"); a term with a capital letter matches only as written ("US" does not match
  "us");
* overlaps: the sentence is read left to right, and at each position the longest term that
  matches there is taken; text taken by one term is not matched again ("red jacket" wins over
  "jacket" in "a red jacket"; of "New York" and "York Street" in "New York Street", the
  first, leftmost one);
* repeats: a term found several times in a sentence gives one constraint, as do two terms
  with the same target term: a constraint asks that the translation contain its phrase, not
  how often.

Each match makes its target term a constraint phrase of the sentence
(tfm.decoding.constraints), reported with the source term that asked for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tfm.data.text import normalize_text
from tfm.decoding.constraints import ConstraintSpec
from tfm.errors import UsageError


@dataclass
class Glossary:
    """Source term -> target term, with the matcher built once."""

    terms: dict[str, str]  # normalised source term -> normalised target term

    def __post_init__(self) -> None:
        # Longest first, so that at each position the longest term matching there is taken
        # (a regular expression takes the first alternative that matches); at equal lengths
        # a term with capitals (matched as written) before an all-lowercase one.
        ordered = sorted(self.terms, key=lambda t: (-len(t), t.islower(), t))
        self._order = ordered
        alternatives = [re.escape(t) if not t.islower() else f"(?i:{re.escape(t)})"
                        for t in ordered]
        body = "|".join(f"({a})" for a in alternatives)
        self._pattern = re.compile(rf"(?<!\w)(?:{body})(?!\w)") if ordered else None

    def __len__(self) -> int:
        return len(self.terms)

    def hits(self, sentence: str) -> list[tuple[str, str]]:
        """(source term, target term) of each term found in ``sentence``, in order, each
        target term once."""
        if self._pattern is None:
            return []
        found: list[tuple[str, str]] = []
        targets: set[str] = set()
        for match in self._pattern.finditer(normalize_text(sentence)):
            term = self._order[match.lastindex - 1]  # type: ignore[operator]
            target = self.terms[term]
            if target not in targets:
                targets.add(target)
                found.append((term, target))
        return found


def load_glossary(path: Path) -> Glossary:
    """The glossary in the TSV file ``path``; UsageError naming the line for what is wrong."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"--glossary {path}: no such file") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"--glossary {path}: not UTF-8 (byte {e.start})") from None
    except OSError as e:
        raise UsageError(f"--glossary {path}: cannot read it ({e.strerror})") from None
    terms: dict[str, str] = {}
    where: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise UsageError(f"{path}, line {number}: {len(fields)} tab-separated fields; a "
                            "glossary line is: source term, a tab, target term")
        source, target = normalize_text(fields[0]), normalize_text(fields[1])
        if not source or not target:
            side = "source" if not source else "target"
            raise UsageError(f"{path}, line {number}: the {side} term is empty")
        if source in terms and terms[source] != target:
            raise UsageError(f"{path}, line {number}: {source!r} is given line "
                            f"{where[source]} already, with another target term "
                            f"({terms[source]!r}); keep one")
        terms.setdefault(source, target)
        where.setdefault(source, number)
    if not terms:
        raise UsageError(f"--glossary {path}: no terms in it (one a line: source term, a tab, "
                        "target term)")
    return Glossary(terms)


def sentence_constraints(sentence: str, phrases: list[str] | None = None,
                         prefix: str | None = None, glossary: Glossary | None = None
                         ) -> ConstraintSpec | None:
    """What a sentence's translation must have: the given ``phrases`` and ``prefix``, and the
    target terms of the ``glossary`` terms found in it; None when nothing."""
    spec = ConstraintSpec(list(phrases or []), prefix,
                          glossary.hits(sentence) if glossary is not None else [])
    return spec if spec else None
