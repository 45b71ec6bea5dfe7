"""Translates the tagged test set (bench/tagged_testset.py) with a tfm model by each method of
placing inline tags, and scores it (bench/tags_score.py).

    python bench/tags_run.py --model MODEL [--set runs/tagged] [--out runs/tagged/MODEL_NAME]
        [--beam N] [--methods attention,position[,tokens]]

The lines go through the documents path (tfm.documents.translate.translate_document), as
`tfm translate --input FILE` sends a document's segments: each line is one segment whose inline
markup is held apart as tags (tfm.documents.inline, the reader the subtitle and catalogue
formats use for markup inside a string), translated whole (``split=False``: the test set is a
sentence a line) and written back with its tags placed. No file format of tfm's fits a
sentence a line with HTML-ish tags as it is (an HTML file would be one paragraph), hence this
small in-memory document.

Methods:

- ``lexicon``: projection by the alignment lexicon the model directory carries (counted by
  `tfm align` over its training corpus, tfm.data.lexical_alignment; tfm's default where
  there is one), or the one given by ``--lexicon``; decoded without attention.
- ``attention``: projection by the model's cross-attention alignments (tfm's default for a
  model without a lexicon; the lexicon hidden).
- ``position``: projection by relative word position, what an engine without attention gets
  (a CTranslate2 export): the floor any alignment must beat.
- ``tokens``: for a model trained on tag-augmented data (`tfm align --tag-augment`; its
  config.json lists ``inline_tags``), the tags sent as tag tokens and placed where the model
  copies them, by attention where it lost or doubled one (tfm.documents.tag_tokens). The other
  methods hide the model's tag tokens, so they measure projection on the same model.

Projection with a guided-alignment model is ``attention`` run on a model trained with
``--guided-alignment`` (its alignments come from the guided head): the one table of
docs/BENCHMARKS.md puts the rows of several models side by side.
- the same sentences without tags (``plain``): the chrF and the time that tags must not cost.

Writes ``hyp.METHOD.de`` and ``hyp.plain.de`` under ``--out`` and prints a line of scores per
method: structure, placement (exact, F1, exact where the reference words were translated),
chrF without tags against chrF plain, and sentences/s tagged against plain.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path

from tags_score import read, score
from tfm.data.lexical_alignment import LEXICON_FILE, Lexicon
from tfm.data.sentences import Passage
from tfm.decoding.engines import load_translator
from tfm.documents import inline
from tfm.documents.segments import Segment
from tfm.documents.translate import (
    DocumentWork,
    model_inline_tags,
    model_lexicon,
    project,
    translate_document,
)

_MARKUP = re.compile(r"<[^<>]*>")


class LinesDocument:
    """A sentence a line with inline markup, read as tfm's documents read markup inside a
    string: each line is a segment, its tags held apart."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.markup: list[inline.Markup] = []
        self.segments = [inline.segment(line, _MARKUP, self.markup) for line in lines]

    def write(self, translations: Sequence[Segment]) -> bytes:
        return "".join(inline.render(s, self.markup) + "\n" for s in translations).encode()


def translate(translator, lines: list[str], beam: int | None, aligned: bool = True,
              tokens: bool = False, counts: dict[str, int] | None = None,
              lexicon: bool = False) -> tuple[list[str], float]:
    """``lines`` translated through the documents path, and the seconds it took;
    ``lexicon``: tags placed by the translator's lexicon (else it is hidden);
    ``aligned=False``: the engine's attention hidden, so tags are placed by position;
    ``tokens``: the tags sent as the model's tag tokens (else its tokens are hidden), and
    ``counts`` given the lines sent with tag tokens (``sent``) and those whose tags the model
    lost, doubled or added, placed by attention instead (``fell_back``)."""
    options = translator.default_options(beam=beam)
    saved, saved_lexicon = translator.supports_attention, model_lexicon(translator)
    translator.supports_attention = saved and aligned
    translator.lexicon = saved_lexicon if lexicon else None
    try:
        start = time.perf_counter()
        document = LinesDocument(lines)
        work = DocumentWork.of(document, split=False, inline_tags=model_inline_tags(
            translator) if tokens else (), lexicon=translator.lexicon)
        out = translate_document(document, translator, options, split=False, work=work)
        seconds = time.perf_counter() - start
        if counts is not None:
            counts.update(sent=sum(m is not None for m in work.marked),
                          fell_back=work.fell_back)
    finally:
        translator.supports_attention, translator.lexicon = saved, saved_lexicon
    return out.decode().splitlines(), seconds


def oracle(tagged: list[str], references: list[str], alignments: list[str] | None
           ) -> list[str]:
    """The tags of ``tagged`` placed by tfm's projection on the reference translation itself,
    by the reference alignment (eflomal's, ``i-j`` pairs a line) or, with None, by position:
    what projection reaches with a perfect translation and a careful aligner."""
    document = LinesDocument(tagged)
    links = [[tuple(map(int, p.split("-"))) for p in a.split()] for a in alignments] \
        if alignments is not None else [None] * len(tagged)
    placed = [project(s, Passage.whole(s.text), [r], [a])
              for s, r, a in zip(document.segments, references, links)]
    return document.write(placed).decode().splitlines()


def run_oracles(testset: Path, out: Path) -> dict[str, dict[str, float]]:
    """The model-free rows: tfm's projection onto the reference, by eflomal's alignment and by
    position."""
    tagged, ref = read(testset / "test.tagged.en"), read(testset / "test.tagged.de")
    plain_ref = read(testset / "test.de")
    results = {}
    for method, alignments in [("oracle-eflomal", read(testset / "test.align")),
                               ("oracle-position", None)]:
        hyps = oracle(tagged, plain_ref, alignments)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"hyp.{method}.de").write_text("".join(f"{h}\n" for h in hyps),
                                              encoding="utf-8")
        results[method] = score(hyps, ref, plain_ref)
    return results


def run(model: Path, testset: Path, out: Path, beam: int | None, methods: list[str],
        lexicon: Path | None = None) -> dict[str, dict[str, float]]:
    """Each method's scores (see the module), its hypotheses written under ``out``;
    ``lexicon``: an alignment lexicon file for the method lexicon, instead of the model's."""
    translator = load_translator(model)
    if lexicon is not None:
        translator.lexicon = Lexicon.load(lexicon)
    if "lexicon" in methods and translator.lexicon is None:
        raise SystemExit(f"{model}: no {LEXICON_FILE} (train it on data of `tfm align`, or "
                         "give --lexicon) for the method lexicon")
    if "tokens" in methods and not model_inline_tags(translator):
        raise SystemExit(f"{model}: no inline-tag tokens (train it on data of `tfm align "
                         "--tag-augment`) for the method tokens")
    tagged, ref = read(testset / "test.tagged.en"), read(testset / "test.tagged.de")
    plain_src = read(testset / "test.en")
    out.mkdir(parents=True, exist_ok=True)
    plain, plain_s = translate(translator, plain_src, beam)
    (out / "hyp.plain.de").write_text("".join(f"{h}\n" for h in plain), encoding="utf-8")
    results = {}
    for method in methods:
        counts: dict[str, int] = {}
        hyps, seconds = translate(translator, tagged, beam,
                                  aligned=method in ("attention", "tokens"),
                                  tokens=method == "tokens", counts=counts,
                                  lexicon=method == "lexicon")
        (out / f"hyp.{method}.de").write_text("".join(f"{h}\n" for h in hyps),
                                              encoding="utf-8")
        scores = score(hyps, ref, plain)
        scores.update(seconds=seconds, plain_seconds=plain_s,
                      per_s=len(tagged) / seconds, plain_per_s=len(tagged) / plain_s,
                      cost=100 * (seconds / plain_s - 1))
        if method == "tokens":
            scores.update(tokens_sent=counts["sent"], fell_back=counts["fell_back"])
        results[method] = scores
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="without: only the oracle rows")
    parser.add_argument("--set", type=Path, default=Path("runs/tagged"), dest="testset")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--beam", type=int)
    parser.add_argument("--methods", default="attention,position")
    parser.add_argument("--lexicon", type=Path, help="an alignment lexicon (a dataset's "
                        f"{LEXICON_FILE}) for the method lexicon, instead of the model's")
    args = parser.parse_args()
    out = args.out or args.testset / (args.model.name if args.model else "oracle")
    results = run_oracles(args.testset, out)
    if args.model is not None:
        results.update(run(args.model, args.testset, out, args.beam, args.methods.split(","),
                           args.lexicon))
    (out / "scores.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    for method, s in results.items():
        speed = (f" {s['per_s']:.1f} vs {s['plain_per_s']:.1f} sent/s ({s['cost']:+.1f}%)"
                 if "per_s" in s else "")
        fallback = (f"; by attention instead: {s['fell_back']} of {s['tokens_sent']} lines "
                    "sent with tag tokens" if "tokens_sent" in s else "")
        print(f"{method}: structure {s['structure']:.1f}% placement exact "
              f"{s['placement_exact']:.1f}% f1 {s['placement_f1']:.1f}% exact-translated "
              f"{s['placement_exact_translated']:.1f}% ({s['tags_translated']}/{s['tags']}) "
              f"chrF {s['chrf']:.2f} vs plain {s['chrf_plain']:.2f} "
              f"({s['chrf_delta']:+.2f}){speed}{fallback}")


if __name__ == "__main__":
    main()
