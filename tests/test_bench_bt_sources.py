"""bench/bt_sources.py: a simulation's synthetic text scored against the held-out real text of
the same corpus lines. bench/ is not a package: the script is loaded from its file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import ModuleType

from bench_scripts import load


def bt_sources() -> ModuleType:
    return load("bt_sources")


def test_each_line_finds_its_own_reference_in_order_past_the_real_pairs_and_a_dropped_line(
) -> None:
    corpus_de = ["Ein Hund.", "Eine Katze.", "Ein Hund.", "Ein Haus.", "Ein Baum."]
    corpus_en = ["A dog (real pair).", "A cat.", "A dog.", "A house.", "A tree."]
    # Monolingual text from line 2 on; "Ein Haus." was dropped by a filter; a trailing space
    # as the corpus had it is no difference.
    refs = bt_sources().references(["Eine Katze. ", "Ein Hund.", "Ein Baum.", "Kein Satz."],
                                   corpus_de, corpus_en, first=1)
    assert refs == ["A cat.", "A dog.", "A tree.", None]


def test_a_perfect_back_translation_scores_100_and_a_wrong_one_less(tmp_path: Path) -> None:
    data, run = tmp_path / "data", tmp_path / "run"
    (run / "bt").mkdir(parents=True)
    data.mkdir()
    en = ["a dog runs on the grass .", "two men play chess in a park .", "a girl reads a book ."]
    de = ["ein hund rennt auf dem gras .", "zwei männer spielen schach im park .",
          "ein mädchen liest ein buch ."]
    for lang, lines in (("en", en), ("de", de)):
        with gzip.open(data / f"train.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    meta = {"synthetic": "source", "request": {"source_lang": "en", "target_lang": "de"}}
    for name, hyps in (("exact", en[1:]), ("wrong", ["a cat sleeps .", "a boy reads ."])):
        (run / "bt" / f"{name}.json").write_text(json.dumps(meta), encoding="utf-8")
        (run / "bt" / f"{name}.de").write_text("\n".join(de[1:]) + "\n", encoding="utf-8")
        (run / "bt" / f"{name}.en").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    score = bt_sources().score
    exact, wrong = score(run, data, "exact", 1), score(run, data, "wrong", 1)
    assert (exact["lines"], exact["unmatched"], round(exact["bleu"], 6)) == (2, 0, 100.0)
    assert exact["synthetic"] == "en (from de)" and exact["ratio"] == 1.0
    assert wrong["bleu"] < 20 and wrong["chrf"] < exact["chrf"]
