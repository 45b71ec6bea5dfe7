"""What ``tfm distill`` reports: the teacher and its student decoding the same sentences,
greedy and beam, each model as it may be deployed (the student in fp32, int8, int8 with its
shortlist, its CTranslate2 export), with BLEU and chrF (tfm.decoding.scoring, sacrebleu's;
the papers' lc-tok BLEU too where sacremoses is installed, the `moses` extra),
sentences a second (the model's load excluded, and given apart), the process's peak memory
and the model's size on disk.

The whole of each set, or its first ``sentences``; each model loaded once for both searches.
The peak memory is the kernel's high-water mark of this process (VmHWM), reset before each
model loads (Linux; elsewhere not reported): the Python process, torch included, while that
model loaded and translated. `tfm distill` measures in a fresh process (``_apart``), where
nothing but the report has run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from tfm.data.corpus import CorpusSpec, iter_pairs

__all__ = ["greedy_bleu", "measure", "table_rows"]

DEPLOYED = ("model.safetensors", "config.json", "tokenizer.json")  # a tfm model's own files


def measure(teacher: Path, student: Path, sets: Sequence[tuple[str, CorpusSpec]], beam: int,
            sentences: int, device: str, shortlist: bool = False,
            export: str | None = None, teacher_export: str | None = None) -> dict[str, Any]:
    """The report's rows for each named set of ``sets``, and the deployment's check on the
    first: how much BLEU the student's int8 weights and shortlist cost against its fp32.
    ``export``, ``teacher_export``: the student's and the teacher's CTranslate2 exports, each
    decoded in fp32 and (on a CPU) int8."""
    models = _models(teacher, student, device, shortlist, export, teacher_export)
    report: dict[str, Any] = {"beam": beam, "sets": {}}
    for name, spec in sets:
        pairs = list(islice(iter_pairs(spec), sentences or None))  # 0: the whole set
        rows = []
        for label, path, precision, listed, engine in models:
            rows += decode_rows(label, path, precision, listed, engine, device, pairs,
                                (1, beam) if beam > 1 else (1,), spec.tgt_lang)
        report["sets"][name] = {"sentences": len(pairs), "rows": rows}
    report["deploy"] = _deployment(report["sets"][sets[0][0]]["rows"])
    return report


def _models(teacher: Path, student: Path, device: str, shortlist: bool, export: str | None,
            teacher_export: str | None = None) -> list[tuple[str, Path, str, bool, str]]:
    """(label, directory, precision, shortlist, engine) of each model the report decodes."""
    models = [("teacher", teacher, "fp32", False, "tfm"), ("student", student, "fp32", False,
                                                           "tfm")]
    cpu = _on_cpu(device)
    if cpu:  # tfm's int8 is a CPU path; the teacher's too, its fastest mode in tfm
        models.append(("teacher", teacher, "int8", False, "tfm"))
        models.append(("student", student, "int8", False, "tfm"))
        if shortlist:
            models.append(("student", student, "int8", True, "tfm"))
    for label, exported in (("teacher", teacher_export), ("student", export)):
        if exported is not None:
            models += [(label, Path(exported), precision, False, "ctranslate2")
                       for precision in ("fp32", "int8")[:2 if cpu else 1]]
    return models


def _on_cpu(device: str) -> bool:
    from tfm.device import resolve_device

    return resolve_device(device).type == "cpu"


def decode_rows(label: str, path: Path, precision: str, listed: bool, engine: str,
                device: str, pairs: list[tuple[str, str]], beams: Sequence[int],
                lang: str | None = None) -> list[dict[str, Any]]:
    """One model loaded, then the sources decoded with each beam of ``beams`` (1: greedy): a
    row each, its BLEU, chrF and sentences/s with the load excluded and included; with the
    target language ``lang`` and sacremoses installed, its lc-tok BLEU (else None)."""
    from tfm.decoding.engines import load_translator
    from tfm.decoding.scoring import score

    _reset_peak()
    start = time.perf_counter()
    # Each engine as `tfm translate` runs it: tfm's default decoding workers (two on a CPU of
    # two threads or more), CTranslate2's own threads.
    translator = load_translator(path, device, precision, shortlist=listed)
    load = time.perf_counter() - start
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    rows = []
    for size in beams:
        search = "greedy" if size == 1 else "beam"
        options = translator.default_options(beam=size)
        start = time.perf_counter()
        hypotheses = [t.text for t in translator.translate(sources, options)]
        seconds = time.perf_counter() - start
        rows.append({"model": label, "engine": engine, "precision": precision,
                     "shortlist": listed, "search": search, "beam": size,
                     "bleu": round(score("bleu", hypotheses, references).score, 2),
                     "bleu_lc_tok": _lc_tok(hypotheses, references, lang),
                     "chrf": round(score("chrf", hypotheses, references).score, 2),
                     "sentences_per_s": round(len(sources) / max(seconds, 1e-9), 2),
                     "sentences_per_s_with_load": round(
                         len(sources) / max(seconds + load, 1e-9), 2),
                     "load_s": round(load, 3), "peak_rss_mb": _peak_mb(),
                     "disk_mb": _disk_mb(path, engine, listed)})
    translator.close()  # this thread's CPU threads back, for the next model
    return rows


def _lc_tok(hypotheses: list[str], references: list[str], lang: str | None) -> float | None:
    """The Multi30k papers' lowercased, Moses-tokenized BLEU, where it can be computed."""
    from importlib.util import find_spec

    if lang is None or find_spec("sacremoses") is None:
        return None
    from tfm.decoding.scoring import bleu_lc_tok

    return round(bleu_lc_tok(hypotheses, references, lang).score, 2)


def greedy_bleu(model_dir: Path, pairs: list[tuple[str, str]], device: str) -> float:
    """The BLEU of the model's greedy translations of the sources of ``pairs`` in fp32, as
    `tfm translate` decodes them, against their references."""
    from tfm.decoding.engines import load_translator
    from tfm.decoding.scoring import score

    translator = load_translator(model_dir, device, "fp32")
    try:
        hypotheses = [t.text for t in translator.translate(
            [s for s, _ in pairs], translator.default_options(beam=1))]
    finally:
        translator.close()
    return round(score("bleu", hypotheses, [t for _, t in pairs]).score, 2)


def _disk_mb(model_dir: Path, engine: str, listed: bool) -> float:
    """What a deployment of the model takes on disk, in MB: a CTranslate2 export's files; a tfm
    model's weights, config and tokenizer (and its shortlist where it is used), not a training
    run's checkpoints and state beside them. tfm's int8 is made when the model loads: its size
    is that of the saved weights."""
    if engine == "ctranslate2":
        files = [f for f in model_dir.iterdir() if f.is_file()]
    else:
        names = DEPLOYED + (("shortlist.safetensors",) if listed else ())
        files = [model_dir / name for name in names if (model_dir / name).is_file()]
    return round(sum(f.stat().st_size for f in files) / 1e6, 3)


def _deployment(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The student's greedy BLEU on the first set in each deployed form, against its fp32's:
    what int8 and the shortlist cost there."""
    greedy = {(r["engine"], r["precision"], r["shortlist"]): r["bleu"]
              for r in rows if r["model"] == "student" and r["search"] == "greedy"}
    base = greedy[("tfm", "fp32", False)]
    return {f"{engine} {precision}" + (" shortlist" if listed else ""):
            {"bleu": bleu, "bleu_change": round(bleu - base, 2)}
            for (engine, precision, listed), bleu in greedy.items()}


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    """The report as the rows of a printed table: set, model, how (engine, precision, ``+sl``
    for the shortlist), search, BLEU, lc-tok BLEU, chrF, sentences/s, peak memory, size on
    disk."""
    rows = []
    for name, part in report["sets"].items():
        for r in part["rows"]:
            how = r["engine"] + " " + r["precision"] + (" +sl" if r["shortlist"] else "")
            memory = "" if r["peak_rss_mb"] is None else f"{r['peak_rss_mb']:,.0f}MB"
            search = "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
            rows.append([name, r["model"], how, search, f"{r['bleu']:.2f}",
                         _or_blank(r.get("bleu_lc_tok")), f"{r['chrf']:.2f}",
                         f"{r['sentences_per_s']:,.1f}", memory,
                         f"{r['disk_mb']:,.1f}MB"])
    return rows


def _or_blank(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def _reset_peak() -> None:
    """The kernel's high-water mark of this process's memory set back to what it holds now
    (Linux, /proc/self/clear_refs); elsewhere nothing."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_mb() -> float | None:
    """This process's peak resident memory since the last reset, in MB (None: unknown)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None
