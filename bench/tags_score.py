"""Scores a translation with inline tags against a tagged reference, as the localisation
literature does.

    python bench/tags_score.py --hyp runs/tagged/hyp.de --ref runs/tagged/test.tagged.de \
        [--plain-hyp runs/tagged/hyp.plain.de]

One sentence a line, HTML-ish inline markup (``<b>..</b>``, ``<a href="..">..</a>``, empty
``<x/>``). Over the lines whose reference holds tags:

- **structure**: the share of lines whose tag structure (the sequence of tags, openings,
  closings and empty tags with their attributes, the text ignored: so their nesting and order)
  equals the reference's (Hashimoto et al., WMT 2019, "structure accuracy").
- **placement**: for each reference tag, the words it covers in the hypothesis (a span: the
  words between its opening and closing; an empty tag: the word before it), lowercased and
  without punctuation, equal to the reference's (``exact``); the F1 of the covered words
  against the reference's as bags (``f1``, the softer measure); and ``exact`` over only the tags
  whose reference words all occur in the hypothesis (``exact_translated``: a placement a
  different but correct translation cannot pass is left out). A tag is matched by its markup
  and its rank among the tags of the same markup; a tag missing in the hypothesis scores 0.

Over all lines: **chrF** (sacrebleu) of the hypothesis with its tags removed against the
reference without tags, and, with ``--plain-hyp`` (the same sentences translated without
tags), that translation's chrF and the difference.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

_MARKUP = re.compile(r"<[^<>]*>")
_EDGE = re.compile(r"^[^\w]+|[^\w]+$")


@dataclass
class Parsed:
    """A tagged line: its text without tags, and each tag as (kind, markup, offset in text)
    with kind ``open``, ``close`` or ``empty``."""

    text: str
    events: list[tuple[str, str, int]]

    @property
    def well_nested(self) -> bool:
        """Every closing closes the innermost tag still open, and every tag is closed."""
        stack: list[str] = []
        for kind, markup, _ in self.events:
            if kind == "open":
                stack.append(name(markup))
            elif kind == "close" and (not stack or stack.pop() != name(markup)):
                return False
        return not stack


def name(markup: str) -> str:
    found = re.match(r"</?\s*([^\s/>]+)", markup)
    return found.group(1).lower() if found else markup


def parse(line: str) -> Parsed:
    """``line``'s text and tags (see :class:`Parsed`)."""
    text, events, position = [], [], 0
    length = 0
    for match in _MARKUP.finditer(line):
        piece = line[position:match.start()]
        text.append(piece)
        length += len(piece)
        markup = match.group()
        kind = "close" if markup.startswith("</") else (
            "empty" if markup.endswith("/>") else "open")
        events.append((kind, markup, length))
        position = match.end()
    text.append(line[position:])
    return Parsed("".join(text), events)


def structure(parsed: Parsed) -> list[str]:
    """The tag structure: the tags' markup in order, the text ignored."""
    return [markup for _, markup, _ in parsed.events]


def words(text: str) -> list[str]:
    """Whitespace words lowercased, punctuation at their edges removed, empty ones dropped."""
    out = [_EDGE.sub("", w.lower()) for w in text.split()]
    return [w for w in out if w]


def covered(parsed: Parsed) -> dict[tuple[str, int], list[str]]:
    """Each tag's key (its markup, its rank among tags of that markup) and the words it
    covers: a span's words, an empty tag's preceding word (``^`` at the start)."""
    out: dict[tuple[str, int], list[str]] = {}
    seen: dict[str, int] = {}
    stack: list[tuple[tuple[str, int], int]] = []
    for kind, markup, offset in parsed.events:
        if kind == "close":
            for k in range(len(stack) - 1, -1, -1):
                if name(stack[k][0][0]) == name(markup):
                    key, start = stack.pop(k)
                    out[key] = words(parsed.text[start:offset])
                    break
            continue
        key = (markup, seen.get(markup, 0))
        seen[markup] = key[1] + 1
        if kind == "open":
            stack.append((key, offset))
        else:
            out[key] = (words(parsed.text[:offset]) or ["^"])[-1:]
    return out


def _f1(hyp: list[str], ref: list[str]) -> float:
    common = sum(min(hyp.count(w), ref.count(w)) for w in set(ref))
    if not hyp or not ref or not common:
        return float(hyp == ref)
    precision, recall = common / len(hyp), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def placement(hyp: Parsed, ref: Parsed) -> list[tuple[bool, float, bool]]:
    """For each reference tag: (exact, f1, whether its reference words all occur in the
    hypothesis)."""
    found, wanted = covered(hyp), covered(ref)
    hyp_words = set(words(hyp.text)) | {"^"}
    out = []
    for key, ref_words in wanted.items():
        mine = found.get(key)
        translated = set(ref_words) <= hyp_words
        if mine is None:
            out.append((False, 0.0, translated))
        else:
            out.append((mine == ref_words, _f1(mine, ref_words), translated))
    return out


def chrf(hyps: list[str], refs: list[str]) -> float:
    import sacrebleu

    return sacrebleu.corpus_chrf(hyps, [refs]).score


def score(hyps: list[str], refs: list[str], plain_hyps: list[str] | None = None
          ) -> dict[str, float]:
    """The scores of the module's docstring, in percent (chrF: its points)."""
    if len(hyps) != len(refs):
        raise SystemExit(f"{len(hyps)} hypotheses for {len(refs)} references")
    parsed = [(parse(h), parse(r)) for h, r in zip(hyps, refs)]
    tagged = [(h, r) for h, r in parsed if r.events]
    places = [p for h, r in tagged for p in placement(h, r)]
    kept = [p for p in places if p[2]]
    out = {
        "lines": len(hyps), "tagged_lines": len(tagged), "tags": len(places),
        "structure": 100 * sum(structure(h) == structure(r) for h, r in tagged) / max(
            len(tagged), 1),
        "well_nested": 100 * sum(h.well_nested for h, _ in tagged) / max(len(tagged), 1),
        "untagged_kept_clean": 100 * sum(not h.events for h, r in parsed if not r.events) / max(
            len(parsed) - len(tagged), 1),
        "placement_exact": 100 * sum(p[0] for p in places) / max(len(places), 1),
        "placement_f1": 100 * sum(p[1] for p in places) / max(len(places), 1),
        "placement_exact_translated": 100 * sum(p[0] for p in kept) / max(len(kept), 1),
        "tags_translated": len(kept),
        "chrf": chrf([h.text for h, _ in parsed], [r.text for _, r in parsed]),
    }
    if plain_hyps is not None:
        out["chrf_plain"] = chrf(plain_hyps, [r.text for _, r in parsed])
        out["chrf_delta"] = out["chrf"] - out["chrf_plain"]
    return out


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hyp", type=Path, required=True)
    parser.add_argument("--ref", type=Path, required=True)
    parser.add_argument("--plain-hyp", type=Path)
    args = parser.parse_args()
    plain = read(args.plain_hyp) if args.plain_hyp else None
    for key, value in score(read(args.hyp), read(args.ref), plain).items():
        print(f"{key}\t{value:.2f}" if isinstance(value, float) else f"{key}\t{value}")


if __name__ == "__main__":
    main()
