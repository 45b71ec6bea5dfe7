"""A tagged test set for inline-tag translation: Multi30k test_2016_flickr en->de with inline
tags wrapped around source spans, and the same tags placed on the reference translation by a
real word aligner (eflomal), as the localisation literature builds its tagged test sets
(Hashimoto et al., WMT 2019; Hanneman & Dinu, WMT 2020).

    python bench/tagged_testset.py [--data ../shared/data/multi30k] [--out runs/tagged]
        [--share 0.5] [--seed 1]

Writes under ``--out`` (never commit it: it is derived from the corpus): ``test.tagged.en``
and ``test.tagged.de`` (one sentence a line, HTML-ish inline markup), ``test.en`` and
``test.de`` (the same lines without tags) and ``test.align`` (the reference alignment of each
line, source-target word pairs, whitespace words).

How: a share of the sentences (``--share``, seeded) get one to three tags: a pair ``<b>..</b>``,
a link ``<a href="..">..</a>``, a nested pair ``<b>..<i>..</i>..</b>`` or an empty ``<x/>``,
over spans of one to four whitespace words (a span's trailing punctuation left outside it).
The test set's untagged lines are aligned by eflomal together with Multi30k's training pairs
(29k, for the statistics), both directions, symmetrised by grow-diag-final; a tag's reference
span is the hull of the reference words aligned to its source words, trimmed of punctuation
the source span left out. A draw whose projection does not keep the source's structure (a
span with no aligned word, two disjoint spans that overlap or nest in the reference, a tag
inside another span than in the source) is drawn again,
up to a few times, then left out: the test set holds only tags a careful aligner can place.
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
import tempfile
from pathlib import Path

from tags_score import parse, structure
from tfm.data.lexical_alignment import grow_diag_final

_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
LINKS = ["https://example.com/dog", "page.html", "#top", "https://en.wikipedia.org/wiki/Berlin"]


def read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def tokens(line: str) -> tuple[list[str], list[int]]:
    """The aligner's tokens of ``line`` (lowercased, punctuation apart) and, for each, the
    index of the whitespace word it came from."""
    out, owner = [], []
    for w, word in enumerate(line.split()):
        for tok in _TOKEN.findall(word.lower()):
            out.append(tok)
            owner.append(w)
    return out, owner


def _pairs(line: str) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in (p.split("-") for p in line.split())}


def align(sources: list[str], targets: list[str], extra_src: list[str],
          extra_tgt: list[str]) -> list[set[tuple[int, int]]]:
    """Whitespace-word alignments of ``sources`` to ``targets`` by eflomal, trained on them
    with ``extra_*`` before them for statistics, symmetrised by grow-diag-final."""
    from eflomal import Aligner

    src_tok = [tokens(s) for s in [*extra_src, *sources]]
    tgt_tok = [tokens(t) for t in [*extra_tgt, *targets]]
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp, "fwd"), Path(tmp, "rev")
        Aligner().align([" ".join(t) for t, _ in src_tok], [" ".join(t) for t, _ in tgt_tok],
                        links_filename_fwd=str(fwd), links_filename_rev=str(rev))
        forward = fwd.read_text(encoding="utf-8").splitlines()
        backward = rev.read_text(encoding="utf-8").splitlines()
    words = []
    for k in range(len(extra_src), len(src_tok)):
        sym = grow_diag_final(_pairs(forward[k]), _pairs(backward[k]), len(src_tok[k][1]),
                              len(tgt_tok[k][1]))
        words.append({(src_tok[k][1][i], tgt_tok[k][1][j]) for i, j in sym
                      if i < len(src_tok[k][1]) and j < len(tgt_tok[k][1])})
    return words


Tag = tuple[str, str, int, int]  # opening, closing ("" for an empty tag), first word, end word


def draw_tags(rng: random.Random, n_words: int) -> list[Tag]:
    """One to three tags over a sentence of ``n_words`` whitespace words, on word boundaries:
    spans of one to four words (disjoint, except a nested pair: ``<b>`` around an ``<i>`` of
    fewer words) and empty ``<x/>`` after a word (first == end: the word it follows)."""
    tags: list[Tag] = []
    used: set[int] = set()
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["b", "a", "nest", "x"])
        if kind == "x":
            tags.append(("<x/>", "", rng.randrange(0, n_words - 1), -1))
            continue
        length = rng.randint(2 if kind == "nest" else 1, 4)
        if length > n_words:
            continue
        start = rng.randrange(0, n_words - length + 1)
        span = set(range(start, start + length))
        if span & used:
            continue
        used |= span
        if kind == "a":
            tags.append((f'<a href="{rng.choice(LINKS)}">', "</a>", start, start + length))
        else:
            tags.append(("<b>", "</b>", start, start + length))
        if kind == "nest":
            inner = rng.randint(1, length - 1)
            first = rng.randrange(start, start + length - inner + 1)
            tags.append(("<i>", "</i>", first, first + inner))
    return [(o, c, a, a if b < 0 else b) for o, c, a, b in tags]


def render(words: list[str], tags: list[Tag]) -> str:
    """``words`` joined by spaces with each tag written in: openings before a span's first word
    (outer first), closings after its last (inner first) but before that word's trailing
    punctuation, an empty tag after the word it follows."""
    out = []
    spans = sorted([t for t in tags if t[1]], key=lambda t: (t[2], -t[3]))
    for w, word in enumerate(words):
        opens = "".join(t[0] for t in spans if t[2] == w)
        closing = sorted([t for t in spans if t[3] - 1 == w], key=lambda t: -t[2])
        closes = "".join(t[1] for t in closing)
        punct = re.search(r"(?<=\w)[^\w\s]+$", word) if closes else None
        body, tail = (word[:punct.start()], punct.group()) if punct else (word, "")
        empties = "".join(t[0] for t in tags if not t[1] and t[2] == w)
        out.append(opens + body + closes + tail + empties)
    return " ".join(out)


def project(tags: list[Tag], links: set[tuple[int, int]]) -> list[Tag] | None:
    """Each tag on the reference's words: a span over the hull of the words aligned to its
    words, an empty tag after the last word aligned to the word it follows; None where a tag
    has no aligned word."""
    placed = []
    for opening, closing, start, end in tags:
        words = range(start, end) if closing else [start]
        found = sorted(j for i, j in links if i in words)
        if not found:
            return None
        if closing:
            placed.append((opening, closing, found[0], found[-1] + 1))
        else:
            placed.append((opening, closing, found[-1], found[-1]))
    return placed


def parents(tags: list[Tag]) -> list[int | None] | None:
    """For each tag, the innermost span holding it (its index), as ``render`` writes them
    (an empty tag after a span's last word lies outside it); None where two spans cover the
    same words or overlap without nesting (no structure to keep)."""
    spans = [(k, t) for k, t in enumerate(tags) if t[1]]
    hulls = [(t[2], t[3]) for _, t in spans]
    if len(set(hulls)) < len(hulls):
        return None
    out: list[int | None] = []
    for k, (_, closing, start, end) in enumerate(tags):
        holders = []
        for m, (_, _, a, b) in spans:
            if m == k:
                continue
            inside = a <= start and end <= b if closing else a <= start < b - 1
            if closing and not inside and start < b and a < end and not (
                    start <= a and b <= end):
                return None  # overlap without nesting
            if inside:
                holders.append((b - a, m))
        out.append(min(holders)[1] if holders else None)
    return out


def tag_line(rng: random.Random, source: str, reference: str, links: set[tuple[int, int]],
             tries: int = 5) -> tuple[str, str] | None:
    """A tagged source and its tagged reference, or None when no draw of ``tries`` projects
    to a well-nested reference holding every tag."""
    src_words, ref_words = source.split(), reference.split()
    if len(src_words) < 2 or not ref_words:
        return None
    for _ in range(tries):
        tags = draw_tags(rng, len(src_words))
        placed = project(tags, links) if tags else None
        if placed is None:
            continue
        if parents(tags) is None or parents(placed) != parents(tags):
            continue
        tagged_src, tagged_ref = render(src_words, tags), render(ref_words, placed)
        if parse(tagged_ref).well_nested:
            return tagged_src, tagged_ref
    return None


def build(data: Path, out: Path, share: float, seed: int, split: str = "test_2016_flickr",
          extra: str = "train", reuse: bool = False) -> dict[str, int]:
    """The tagged test set under ``out`` (see the module); returns counts for the report.
    ``reuse``: the alignment ``out/test.align`` of an earlier run, if there, not aligned
    again."""
    sources, references = read_lines(data / f"{split}.en.gz"), read_lines(data / f"{split}.de.gz")
    saved = out / "test.align"
    if reuse and saved.exists():
        links = [{(int(a), int(b)) for a, b in (p.split("-") for p in line.split())}
                 for line in saved.read_text(encoding="utf-8").splitlines()]
    else:
        links = align(sources, references, read_lines(data / f"{extra}.en.gz"),
                      read_lines(data / f"{extra}.de.gz"))
    rng = random.Random(seed)
    tagged_src, tagged_ref, counts = [], [], {"lines": len(sources), "tagged": 0,
                                               "left_untagged": 0, "reordered": 0,
                                               "drawn": 0}
    for source, reference, pairs in zip(sources, references, links):
        drawn = rng.random() < share
        counts["drawn"] += drawn
        pair = tag_line(rng, source, reference, pairs) if drawn else None
        if pair is None:
            pair = (source, reference)
        elif structure(parse(pair[0])) != structure(parse(pair[1])):
            counts["reordered"] += 1
        counts["tagged"] += pair[0] != source
        tagged_src.append(pair[0])
        tagged_ref.append(pair[1])
    counts["left_untagged"] = counts["lines"] - counts["tagged"]
    out.mkdir(parents=True, exist_ok=True)
    for name, lines in [("test.tagged.en", tagged_src), ("test.tagged.de", tagged_ref),
                        ("test.en", sources), ("test.de", references),
                        ("test.align", [" ".join(f"{i}-{j}" for i, j in sorted(p))
                                        for p in links])]:
        (out / name).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--out", type=Path, default=Path("runs/tagged"))
    parser.add_argument("--share", type=float, default=0.5, help="share of lines tagged")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--split", default="test_2016_flickr",
                        help="the Multi30k split tagged (val: a set to choose methods on); "
                        "its files are named test.* all the same")
    parser.add_argument("--reuse-alignment", action="store_true",
                        help="take OUT/test.align from an earlier run instead of aligning")
    args = parser.parse_args()
    counts = build(args.data, args.out, args.share, args.seed, args.split,
                   reuse=args.reuse_alignment)
    print(f"{args.out}: {counts['lines']} lines, {counts['drawn']} drawn to be tagged, "
          f"{counts['tagged']} tagged "
          f"({counts['reordered']} whose reference puts the tags in another order)")


if __name__ == "__main__":
    main()
