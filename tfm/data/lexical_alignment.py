"""Word alignment of a sentence and its translation by a lexicon learnt from the training
corpus's own alignments, for placing inline tags (tfm.documents.translate).

`tfm align` aligns the training pairs with eflomal for guided alignment; what it found is also
counted here (``Lexicon.count``): how often each source word was linked to each target word,
how far the links jump, which words stay unlinked. A sentence and its translation are then
aligned by a hidden Markov model over those counts (Vogel et al., 1996, with the empty word of
Och and Ney, 2003), decoded by Viterbi in both directions and symmetrised by
grow-diag-final-and, as the training pairs were. It reads the model's words, not its
attention: deterministic, and as good as the corpus's aligner is on the words the corpus has
(measured in docs/BENCHMARKS.md, "Tags placed by a lexicon").

Words are the whitespace words of the texts, compared by ``key``: lower case, without the
punctuation at their edges, so that "garden." and "Garden" are one word.
"""

from __future__ import annotations

import gzip
import json
import math
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tfm.atomic import atomic_write_bytes
from tfm.errors import ModelError

LEXICON_FILE = "alignment_lexicon.json.gz"  # in a prepared dataset and in a model directory
FORMAT = 1
TOP = 32  # targets kept for each source word (and sources for each target word)
# Pseudo-counts: a pair never seen is 1/1000 of a link; a word compared with the same word
# (a name, a number) one link. Jumps never seen half a jump.
UNSEEN, SAME, UNSEEN_JUMP = 1e-3, 1.0, 0.5
Pairs = list[tuple[int, int]]
__all__ = ["LEXICON_FILE", "Lexicon", "grow_diag_final", "grow_diag_final_and", "key",
           "load_lexicon"]


def key(word: str) -> str:
    """The lexicon's form of a word: lower case, the punctuation at its edges dropped (a word
    of punctuation alone is kept whole)."""
    lowered = word.lower()
    start, end = 0, len(lowered)
    while start < end and unicodedata.category(lowered[start]).startswith("P"):
        start += 1
    while end > start and unicodedata.category(lowered[end - 1]).startswith("P"):
        end -= 1
    return lowered[start:end] or lowered


@dataclass
class _Direction:
    """One direction's counts: for each given word, the words it was linked to (``links``,
    their totals in ``totals``); jumps between the positions of consecutive linked words;
    the words left without a link (``empty``), out of ``words``."""

    links: dict[str, dict[str, float]] = field(default_factory=dict)
    totals: dict[str, float] = field(default_factory=dict)
    jumps: dict[int, float] = field(default_factory=dict)
    empty: dict[str, float] = field(default_factory=dict)
    words: float = 0.0

    def to_json(self) -> dict:
        return {"links": self.links, "jumps": {str(d): c for d, c in self.jumps.items()},
                "empty": self.empty, "words": self.words}

    @classmethod
    def from_json(cls, data: dict) -> _Direction:
        links = {w: dict(t) for w, t in data["links"].items()}
        return cls(links, {w: sum(t.values()) for w, t in links.items()},
                   {int(d): float(c) for d, c in data["jumps"].items()},
                   dict(data["empty"]), float(data["words"]))

    def emission(self, given: list[str], emitted: list[str]) -> np.ndarray:
        """log p(emitted word | given word), (len(emitted), len(given))."""
        out = np.empty((len(emitted), len(given)))
        for i, g in enumerate(given):
            row, total = self.links.get(g, {}), self.totals.get(g, 0.0)
            for j, e in enumerate(emitted):
                count = row.get(e, 0.0) + (SAME if e == g else UNSEEN)
                out[j, i] = math.log(count / (total + SAME))
        return out

    def empty_emission(self, emitted: list[str]) -> np.ndarray:
        """log p(emitted word | the empty word)."""
        total = sum(self.empty.values())
        return np.array([math.log((self.empty.get(e, 0.0) + UNSEEN) / (total + SAME))
                         for e in emitted])

    def jump(self, distance: np.ndarray) -> np.ndarray:
        """log p(the next linked position is ``distance`` words on), smoothed."""
        total = sum(self.jumps.values()) + UNSEEN_JUMP * 100
        low, high = int(distance.min()), int(distance.max())
        counts = np.array([self.jumps.get(d, 0.0) for d in range(low, high + 1)])
        return np.log((counts[distance - low] + UNSEEN_JUMP) / total)

    def viterbi(self, given: list[str], emitted: list[str]) -> Pairs:
        """(given position, emitted position) of each emitted word linked by the most likely
        path of the HMM: states are the given words, each also as the empty word that keeps
        its position; the empty word is taken as often as the corpus left words unlinked."""
        n, m = len(given), len(emitted)
        if n == 0 or m == 0:
            return []
        p_empty = min(max(sum(self.empty.values()) / max(self.words, 1.0), 1e-4), 0.5)
        stay, move = math.log(p_empty), math.log(1 - p_empty)
        emit, emit_empty = self.emission(given, emitted), self.empty_emission(emitted)
        positions = np.arange(n)
        moves = self.jump(positions[None, :] - positions[:, None]) + move  # [from, to]
        # score[k]: the best path ending in state k (k < n: a word; n + i: empty after word i)
        score = np.concatenate([self.jump(positions + 1) + move + emit[0],
                                self.jump(positions + 1) + stay + emit_empty[0]])
        back = np.zeros((m, 2 * n), dtype=np.int64)
        for j in range(1, m):
            # Leaving a position, a word and the empty word after it are the same place.
            word_better = score[:n] >= score[n:]
            at = np.where(word_better, score[:n], score[n:])
            came = np.where(word_better, positions, positions + n)
            into = at[:, None] + moves
            best = into.argmax(axis=0)
            score = np.concatenate([into[best, positions] + emit[j], at + stay + emit_empty[j]])
            back[j] = np.concatenate([came[best], came])
        state, links = int(score.argmax()), []
        for j in range(m - 1, -1, -1):
            if state < n:
                links.append((state, j))
            state = int(back[j, state])
        return links[::-1]


@dataclass
class Lexicon:
    """Counts of a corpus's word alignments, both ways (forward: target words given the
    source words; reverse: source words given the target words)."""

    forward: _Direction
    reverse: _Direction

    @classmethod
    def count(cls, sources: Sequence[Sequence[str]], targets: Sequence[Sequence[str]],
              alignments: Sequence[Pairs]) -> Lexicon:
        """The counts of aligned sentences (word lists, their (source, target) word pairs)."""
        forward, reverse = _Counts(), _Counts()
        for src, tgt, pairs in zip(sources, targets, alignments):
            src_keys, tgt_keys = [key(w) for w in src], [key(w) for w in tgt]
            pairs = [(i, j) for i, j in pairs if 0 <= i < len(src) and 0 <= j < len(tgt)]
            forward.add(src_keys, tgt_keys, pairs)
            reverse.add(tgt_keys, src_keys, [(j, i) for i, j in pairs])
        return cls(forward.done(), reverse.done())

    def align(self, source: Sequence[str], target: Sequence[str]) -> Pairs:
        """(source word, target word) pairs of a sentence and its translation (whitespace
        words), sorted."""
        src, tgt = [key(w) for w in source], [key(w) for w in target]
        forward = self.forward.viterbi(src, tgt)
        reverse = [(i, j) for j, i in self.reverse.viterbi(tgt, src)]
        return grow_diag_final_and(forward, reverse, len(src), len(tgt))

    def to_bytes(self) -> bytes:
        data = {"format": FORMAT, "forward": self.forward.to_json(),
                "reverse": self.reverse.to_json()}
        return gzip.compress(json.dumps(data, ensure_ascii=False).encode(), mtime=0)

    def save(self, path: Path) -> None:
        atomic_write_bytes(path, self.to_bytes())

    @classmethod
    def load(cls, path: Path) -> Lexicon:
        try:
            data = json.loads(gzip.decompress(Path(path).read_bytes()))
            if data.get("format") != FORMAT:
                raise ModelError(f"{path}: an alignment lexicon of format "
                                 f"{data.get('format')}, this tfm reads {FORMAT}")
            return cls(_Direction.from_json(data["forward"]),
                       _Direction.from_json(data["reverse"]))
        except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelError(f"{path}: not an alignment lexicon ({e})") from e


def grow_diag_final_and(forward: Pairs, reverse: Pairs, n_src: int, n_tgt: int) -> Pairs:
    """The symmetrisation of Koehn et al. (2005): start from the intersection of the two
    directions, grow it by union links next to an aligned point (diagonals included) that
    align a so far unaligned word, then add union links whose both words are unaligned."""
    return grow_diag_final(forward, reverse, n_src, n_tgt, final_and=True)


def grow_diag_final(forward: Pairs, reverse: Pairs, n_src: int, n_tgt: int, *,
                    final_and: bool = False) -> Pairs:
    """Koehn et al.'s grow-diag-final: grow as grow-diag-final-and does, then add the union
    links with at least one unaligned word (both unaligned with ``final_and``). Links outside
    the ``n_src`` x ``n_tgt`` grid are never added by the final step."""
    union, alignment = set(forward) | set(reverse), set(forward) & set(reverse)
    aligned_src = {i for i, _ in alignment}
    aligned_tgt = {j for _, j in alignment}
    neighbours = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]
    grown = True
    while grown:
        grown = False
        for i, j in sorted(alignment):
            for di, dj in neighbours:
                link = (i + di, j + dj)
                if link in union and link not in alignment and (
                        link[0] not in aligned_src or link[1] not in aligned_tgt):
                    alignment.add(link)
                    aligned_src.add(link[0])
                    aligned_tgt.add(link[1])
                    grown = True
    for direction in (forward, reverse):  # final: unaligned words take a union link
        for i, j in sorted(direction):
            unaligned = ((i not in aligned_src and j not in aligned_tgt) if final_and
                         else (i not in aligned_src or j not in aligned_tgt))
            if unaligned and 0 <= i < n_src and 0 <= j < n_tgt:
                alignment.add((i, j))
                aligned_src.add(i)
                aligned_tgt.add(j)
    return sorted(alignment)


def load_lexicon(model_dir: Path) -> Lexicon | None:
    """The model directory's alignment lexicon, None where it has none."""
    path = Path(model_dir) / LEXICON_FILE
    return Lexicon.load(path) if path.is_file() else None


class _Counts:
    """One direction's counts as they are gathered."""

    def __init__(self) -> None:
        self.links: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.jumps: Counter[int] = Counter()
        self.empty: Counter[str] = Counter()
        self.words = 0

    def add(self, given: list[str], emitted: list[str], pairs: Pairs) -> None:
        """One sentence: ``pairs`` are (given position, emitted position)."""
        linked: dict[int, list[int]] = defaultdict(list)
        for i, j in pairs:
            self.links[given[i]][emitted[j]] += 1
            linked[j].append(i)
        last = -1
        for j, word in enumerate(emitted):
            if j not in linked:
                self.empty[word] += 1
                continue
            here = min(linked[j])
            self.jumps[here - last] += 1
            last = here
        self.words += len(emitted)

    def done(self) -> _Direction:
        links = {g: dict(c.most_common(TOP)) for g, c in self.links.items()}
        return _Direction(links, {g: float(sum(t.values())) for g, t in links.items()},
                          dict(self.jumps), dict(self.empty), float(self.words))
