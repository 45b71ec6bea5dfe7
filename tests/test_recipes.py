"""The recipes in recipes/ run end to end, as a user runs them, on a tiny Multi30k-shaped corpus
(the models are made tiny and trained a few steps by the extra `tfm train` options every recipe
passes on): each writes its translations and prints its scores."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PAIRS

ROOT = Path(__file__).resolve().parent.parent
# A 1+1-layer model of d_model 32, a few steps: the recipes' own options come first, these win.
TINY = ["--d-model", "32", "--n-heads", "2", "--encoder-layers", "1", "--decoder-layers", "1",
        "--d-ff", "64", "--max-steps", "6", "--valid-every", "3"]


@pytest.fixture
def multi30k_like(tmp_path: Path) -> Path:
    """{train,val,test_2016_flickr}.{en,de}.gz as Multi30k ships them."""
    data = tmp_path / "data"
    data.mkdir()
    splits = {"train": PAIRS * 3, "val": PAIRS[:8], "test_2016_flickr": PAIRS[8:14]}
    for split, pairs in splits.items():
        for side, lang in enumerate(("en", "de")):
            with gzip.open(data / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.writelines(pair[side] + "\n" for pair in pairs)
    return data


def run_recipe(name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """bash recipes/NAME ARGS with the environment's tfm first on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    result = subprocess.run(["bash", str(ROOT / "recipes" / name), *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PATH": path, **env})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_the_quick_recipe_trains_and_scores_val_and_test(multi30k_like, tmp_path):
    out = tmp_path / "quick"
    result = run_recipe("multi30k.sh", str(multi30k_like), "en", "de", str(out), *TINY)
    assert (out / "model" / "model.safetensors").exists()
    assert len(lines(out / "val.hyp")) == 8
    assert len(lines(out / "test_2016_flickr.hyp")) == 6
    assert result.stdout.count("BLEU = ") >= 2  # val and test


def test_the_distillation_recipe_trains_the_teachers_on_with_their_translations(
        multi30k_like, tmp_path):
    out = tmp_path / "distill"
    result = run_recipe("multi30k-distill.sh", str(multi30k_like), "en", "de", str(out), *TINY,
                        TEACHER_MINUTES="5", STUDENT_MINUTES="5")
    for model in ("teachers/member1", "teachers/member2", "student3", "student4"):
        assert (out / model / "model.safetensors").exists(), model
    train = len(PAIRS) * 3
    assert len(lines(out / "train.distilled.de")) == train  # every training source translated
    with gzip.open(out / "corpus" / "train.de.gz", "rt", encoding="utf-8") as f:
        assert len(f.read().splitlines()) == 2 * train  # the references, then the translations
    for seed, teacher in ((3, "member1"), (4, "member2")):  # each student starts as a teacher
        provenance = json.loads((out / f"student{seed}" / "config.json").read_text())[
            "provenance"]
        assert provenance["init_from"] == str(out / "teachers" / teacher)
    assert len(lines(out / "val.hyp")) == 8
    assert len(lines(out / "test_2016_flickr.hyp")) == 6
    # Both candidates scored on val, the better one decoding test.
    assert "== val, the 2 students together" in result.stdout
    assert "== val, the 2 students and the 2 teachers together" in result.stdout
    assert "chosen on val" in result.stdout
