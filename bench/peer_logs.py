"""What the peers' logs say: OpenNMT-py 3.5.1's and JoeyNMT 2.3.0's log lines, and the figures
bench/peers.py reads from them.

A training log is a list of ``(t, line)``: seconds since the toolkit was launched (the time
bench/peers.py saw the line arrive), and the line as the toolkit wrote it. The formats, from the
toolkits' own code:

- OpenNMT-py (``onmt/utils/statistics.py``, ``model_saver.py``, ``translate/translator.py``)::

    [2026-11-23 10:00:05,123 INFO] Step 20/10000000; acc: 9.8; ppl: 812.3; xent: 6.7; \
lr: 0.00005; sents:     130; bsz: 1771/1893/130; 1770/1892 tok/s;      9 sec;
    [2026-11-23 10:00:05,321 INFO] Saving checkpoint WORK/onmt/model_step_20.pt
    [2026-11-23 10:01:00,000 INFO] Total translation time (s): 3.5

  ``bsz`` is the mean source / target tokens / sentences per batch of the window since the
  previous report (source pieces; target pieces + </s>).
- JoeyNMT (``joeynmt/training.py``, ``prediction.py``)::

    2026-11-23 10:00:05,123 - INFO - joeynmt.training - Epoch   1, Step:       20, \
Batch Loss:     6.123456, Batch Acc: 0.098000, Tokens per Sec:     1810, Lr: 0.000050
    2026-11-23 10:00:09,000 - INFO - joeynmt.training - Checkpoint saved in /w/model/20.ckpt.
    2026-11-23 10:01:00,000 - INFO - joeynmt.prediction - Generation took 12.3456[sec].

  ``Tokens per Sec`` counts target tokens (pieces + </s>) of the window since the previous
  report.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Callable

Lines = list[tuple[float, str]]  # (seconds since launch, line)
Checkpoint = tuple[int, str, float]  # (step, path, seconds since launch when it was complete)

ONMT_START = re.compile(r"Step\s+\d+/")  # the first training report: training has started
ONMT_STEP = re.compile(r"Step\s+(\d+)(?:/\s*\d+)?; acc:.*?bsz:\s*(\d+)/\s*(\d+)/\s*(\d+);")
ONMT_SAVE = re.compile(r"Saving checkpoint (\S+_step_(\d+)\.pt)")
ONMT_TIME = re.compile(r"Total translation time \(s\): ([\d.]+)")

JOEY_START = re.compile(r"Step:\s+\d+,")
JOEY_STEP = re.compile(r"Epoch\s+\d+, Step:\s+(\d+), Batch Loss:.*Tokens per Sec:\s+([\d.]+)")
JOEY_SAVED = re.compile(r"Checkpoint saved in (\S+?(\d+)\.ckpt)")
JOEY_VALID = re.compile(r"Predicting \d+ example|Evaluation result|Checkpoint saved|Hooray")
JOEY_TIME = re.compile(r"Generation took ([\d.]+)\[sec\]")

# The one line of results bench/peers.py's CTranslate2 script prints: "RESULT {json}".
CT2_RESULT = re.compile(r"^RESULT (\{.*\})$", re.MULTILINE)


def last_checkpoint(lines: Lines, after_t: float, saved: re.Pattern,
                    complete: Callable[[str], bool] = lambda path: True) -> Checkpoint | None:
    """The last checkpoint announced at or after ``after_t`` (``saved``: a pattern whose groups
    are the path and the step) whose file is ``complete``; None if there is none yet."""
    for t, line in reversed(lines):
        if t < after_t:
            return None
        match = saved.search(line)
        if match and complete(match.group(1)):
            return int(match.group(2)), match.group(1), t
    return None


def onmt_checkpoint(lines: Lines, after_t: float) -> Checkpoint | None:
    """OpenNMT-py announces a checkpoint before writing it: it is complete once its file is a
    whole zip archive (torch.save writes the zip directory last)."""
    return last_checkpoint(lines, after_t, ONMT_SAVE, zipfile.is_zipfile)


def joey_checkpoint(lines: Lines, after_t: float) -> Checkpoint | None:
    """JoeyNMT announces a checkpoint once it is written."""
    return last_checkpoint(lines, after_t, JOEY_SAVED)


def onmt_throughput(lines: Lines) -> dict:
    """Non-padding source + target tokens per second, from the first report to the last: each
    window's mean tokens per batch times its steps, over the wall time between the reports."""
    reports = []
    for t, line in lines:
        match = ONMT_STEP.search(line)
        if match:
            step, src_b, tgt_b, _ = (int(g) for g in match.groups())
            reports.append((t, step, src_b + tgt_b))
    if len(reports) < 2:
        return {"tokens_per_s": None, "reports": len(reports)}
    tokens = sum((step - prev_step) * per_batch
                 for (_, prev_step, _), (_, step, per_batch) in zip(reports, reports[1:]))
    seconds = reports[-1][0] - reports[0][0]
    steps = reports[-1][1] - reports[0][1]
    return {"tokens_per_s": round(tokens / seconds, 1), "measured_steps": steps,
            "measured_seconds": round(seconds, 1),
            "tokens_per_step": round(tokens / steps, 1), "s_per_step": round(seconds / steps, 3),
            "measure": "OpenNMT-py report lines: mean src+tgt non-pad tokens per batch x steps, "
                       "over the wall time from the first to the last report"}


def joey_throughput(lines: Lines, src_tgt_ratio: float) -> dict:
    """Target tokens/s of the report windows without a validation (the first window left out),
    weighted by their wall time, scaled to source + target by the corpus' ratio of source to
    target tokens: an estimate, since JoeyNMT's batches are random samples of the corpus."""
    tokens = seconds = 0.0
    steps = 0
    prev = None
    valid_in_window = False
    for t, line in lines:
        if JOEY_VALID.search(line):
            valid_in_window = True
            continue
        match = JOEY_STEP.search(line)
        if not match:
            continue
        step, rate = int(match.group(1)), float(match.group(2))
        if prev is not None and not valid_in_window:
            dt = t - prev[0]
            tokens += rate * dt
            seconds += dt
            steps += step - prev[1]
        prev = (t, step)
        valid_in_window = False
    if not seconds:
        return {"tokens_per_s": None}
    tgt_rate = tokens / seconds
    return {"tokens_per_s": round(tgt_rate * (1 + src_tgt_ratio), 1),
            "tgt_tokens_per_s": round(tgt_rate, 1), "measured_steps": steps,
            "measured_seconds": round(seconds, 1),
            "tokens_per_step": round(tokens * (1 + src_tgt_ratio) / steps, 1),
            "s_per_step": round(seconds / steps, 3),
            "measure": "JoeyNMT report lines: target tokens/s of windows without validation, "
                       f"weighted by wall time, x (1 + src/tgt corpus ratio {src_tgt_ratio:.3f}) "
                       "(estimate)"}


def reported_seconds(text: str, pattern: re.Pattern) -> float | None:
    """The seconds a toolkit reports of its own (the last report in ``text``), or None."""
    found = pattern.findall(text)
    return float(found[-1]) if found else None


def ct2_result(text: str) -> dict:
    """The figures the CTranslate2 script printed on its RESULT line."""
    match = CT2_RESULT.search(text)
    if match is None:
        raise RuntimeError("the CTranslate2 script printed no RESULT line")
    return json.loads(match.group(1))
