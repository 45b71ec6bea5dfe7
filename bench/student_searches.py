"""A distilled student at several beam sizes against its teacher at beam 5, one run: which
search of the student meets which of the fast-students goals (docs/BENCHMARKS.md).

    python bench/student_searches.py --distill runs/students-de-en/distill \\
        --student student-3-2-ssru --data ../shared/data/multi30k -s de -t en \\
        --beams 1 2 3 5 --out runs/student-searches.json

`tfm distill`'s report decodes the student greedy and at the teacher's beam; this decodes it
(int8 with its shortlist where it has one, as it is deployed on a CPU) at every beam of
--beams, and the teacher at beam 5 in each of its modes: tfm fp32 and int8, and CTranslate2
fp32 and int8 from the export `tfm distill` made (where it did). For each set (the whole of
val, then of test) each model is loaded and decodes it at each of its beams, as the report
does (tfm.training.distill_report.decode_rows: model load excluded and included). For every
student row: BLEU (cased sacreBLEU; the papers' lc-tok beside it where sacremoses is
installed) against the teacher's tfm fp32 beam 5 (the recipe's search), and its speed against
the teacher's fastest beam-5 mode in tfm and in CTranslate2. Writes the JSON, then prints the
Markdown table. Run it alone: the speeds are only comparable within one run.
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import islice
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETS = ("val", "test_2016_flickr")


def models(distill: Path, student: str, teacher: Path, device: str
           ) -> list[tuple[str, Path, str, bool, str]]:
    """(label, directory, precision, shortlist, engine): the report's (tfm.training.
    distill_report), less the student's forms other than its deployed one: its averaged
    weights where `tfm distill` deployed those, in int8 with its shortlist (on a CPU)."""
    from tfm.training.distill_report import _models

    stages = json.loads((distill / "stages.json").read_text())
    deployed = Path(stages.get(student, {}).get("average", {}).get("deployed")
                    or distill / student)
    listed = (deployed / "shortlist.safetensors").is_file()
    export = stages.get("teacher", {}).get("export")
    every = _models(teacher, deployed, device, listed, None,
                    export if export and Path(export).is_dir() else None)
    int8 = any(precision == "int8" for label, _, precision, _, _ in every if label == "student")
    return [m for m in every if m[0] == "teacher" or m[2:4] == ("int8" if int8 else "fp32",
                                                                 listed and int8)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--distill", type=Path, required=True, help="tfm distill's --output")
    parser.add_argument("--student", required=True, help="the student's name in it")
    parser.add_argument("--teacher", type=Path, help="the teacher's model directory "
                        "(default: the recipe's, DISTILL/../teacher/model)")
    parser.add_argument("--data", type=Path, required=True,
                        help="holds {val,test_2016_flickr}.LANG.gz")
    parser.add_argument("-s", "--src", required=True)
    parser.add_argument("-t", "--tgt", required=True)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 2, 3, 5])
    parser.add_argument("--limit", type=int, default=0,
                        help="the first N sentences of each set (0: all)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    from bench.machine import describe
    from tfm.data.corpus import CorpusSpec, iter_pairs
    from tfm.training.distill_report import decode_rows

    teacher = args.teacher or teacher_of(args.distill)
    result = {"machine": describe(measure_peak=False), "student": args.student,
              "teacher": str(teacher), "sets": {}}
    for name in SETS:
        spec = CorpusSpec((str(args.data / f"{name}.{args.src}.gz"),
                           str(args.data / f"{name}.{args.tgt}.gz")), args.src, args.tgt)
        pairs = list(islice(iter_pairs(spec), args.limit or None))
        rows = []
        for label, path, precision, listed, engine in models(args.distill, args.student,
                                                             teacher, args.device):
            beams = args.beams if label == "student" else [5]
            rows += decode_rows(label, path, precision, listed, engine, args.device, pairs,
                                beams, args.tgt)
        result["sets"][name] = {"sentences": len(pairs), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['machine']['cpu']}, {result['machine']['cores']} threads")
    for name in SETS:
        print(f"\n{name}\n" + table(result["sets"][name]["rows"]))


def teacher_of(distill: Path) -> Path:
    """The teacher `tfm distill` read: its path as the run's distill.json keeps only a hash,
    the path comes from the recipe's layout (OUT/teacher/model beside OUT/distill)."""
    teacher = distill.parent / "teacher" / "model"
    if not (teacher / "config.json").is_file():
        raise SystemExit(f"no teacher at {teacher}: give --teacher")
    return teacher


def table(rows: list[dict]) -> str:
    """The Markdown table: each row, then for the student its BLEU against the teacher's tfm
    fp32 beam 5 and its speed against the teacher's fastest beam 5 in each engine."""
    teacher = [r for r in rows if r["model"] == "teacher"]
    reference = next(r["bleu"] for r in teacher if r["engine"] == "tfm" and
                     r["precision"] == "fp32")
    fastest = {engine: max((r["sentences_per_s"] for r in teacher if r["engine"] == engine),
                           default=None) for engine in ("tfm", "ctranslate2")}
    lines = ["| model | engine, precision | search | BLEU | lc-tok | chrF | sent/s | with load | "
             "BLEU - teacher | x tfm teacher | x CTranslate2 teacher |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        how = ("tfm" if r["engine"] == "tfm" else "CTranslate2") + " " + r["precision"] + (
            " + shortlist" if r["shortlist"] else "")
        search = "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
        extra = ["", "", ""]
        if r["model"] == "student":
            extra = [f"{r['bleu'] - reference:+.2f}"] + [
                f"{r['sentences_per_s'] / fastest[e]:.2f}x" if fastest[e] else "-"
                for e in ("tfm", "ctranslate2")]
        lc_tok = "-" if r.get("bleu_lc_tok") is None else f"{r['bleu_lc_tok']:.2f}"
        lines.append(f"| {r['model']} | {how} | {search} | {r['bleu']:.2f} | {lc_tok} | "
                     f"{r['chrf']:.2f} | "
                     f"{r['sentences_per_s']:.1f} | {r['sentences_per_s_with_load']:.1f} | "
                     + " | ".join(extra) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
