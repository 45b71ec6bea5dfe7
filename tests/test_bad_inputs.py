"""Bad input, as users bring it: every case is handled sensibly or refused with one line on
stderr naming the file, line or option at fault, with its exit code and no traceback.

Exit codes: 2 usage, 3 data, 4 model, 5 resources (tfm/errors.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import tfm

DEMO = Path(__file__).resolve().parent.parent / "data" / "demo"


def refused(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    """The one line on stderr, after checking the exit code and that there is no traceback."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tok.json"
    result = tfm("train-tokenizer", "--train", str(DEMO / "train"), "-s", "en", "-t", "de",
                 "--vocab-size", "400", "-o", str(path))
    assert result.returncode == 0, result.stderr
    return path


def prepare(tmp_path: Path, tokenizer: Path, src: bytes, tgt: bytes
            ) -> subprocess.CompletedProcess:
    (tmp_path / "c.en").write_bytes(src)
    (tmp_path / "c.de").write_bytes(tgt)
    return tfm("prepare", "--train", str(tmp_path / "c.en"), "--train", str(tmp_path / "c.de"),
               "--tokenizer", str(tokenizer), "-o", str(tmp_path / "out"))


def report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "prepare.json").read_text())["splits"]["train"]


# --- corpora ---------------------------------------------------------------------------------

def test_misaligned_files(tmp_path, tokenizer) -> None:
    refused(prepare(tmp_path, tokenizer, b"a\nb\nc\n", b"x\ny\n"), 3,
            "c.en has 3 lines but", "c.de has 2", "aligned line by line")


def test_an_empty_file(tmp_path, tokenizer) -> None:
    refused(prepare(tmp_path, tokenizer, b"", b""), 3, "c.en is empty")


def test_a_file_of_blank_lines(tmp_path, tokenizer) -> None:
    refused(prepare(tmp_path, tokenizer, b"\n \n\t\n", b"\n\n\n"), 3,
            "no pair is left after cleaning")


def test_invalid_utf8_names_file_line_and_column(tmp_path, tokenizer) -> None:
    refused(prepare(tmp_path, tokenizer, b"fine\ncaf\xe9 au lait\n", b"gut\nKaffee\n"), 3,
            "c.en:2", "column 4", "UTF-8")


def test_nul_bytes_and_control_characters_are_removed_and_counted(tmp_path, tokenizer) -> None:
    result = prepare(tmp_path, tokenizer, b"a\x00 dog\nthe\x07 cat\n", b"ein Hund\ndie Katze\n")
    assert result.returncode == 0, result.stderr
    assert report(tmp_path)["invisible_removed"] == 2
    assert "removed control or zero-width characters from 2 pairs" in result.stderr


def test_windows_line_endings_and_a_byte_order_mark(tmp_path, tokenizer) -> None:
    result = prepare(tmp_path, tokenizer, b"\xef\xbb\xbfThe dog.\r\nThe cat.\r\n",
                     b"Der Hund.\r\nDie Katze.\r\n")
    assert result.returncode == 0, result.stderr
    assert report(tmp_path)["kept"] == 2
    assert report(tmp_path)["invisible_removed"] == 0  # the BOM and CR are not text


def test_lines_of_100000_characters_are_dropped_as_too_long(tmp_path, tokenizer) -> None:
    long = ("word " * 20_000).encode()
    result = prepare(tmp_path, tokenizer, b"short.\n" + long + b"\n", b"kurz.\n" + long + b"\n")
    assert result.returncode == 0, result.stderr
    assert report(tmp_path)["dropped"]["too long"] == 1
    assert report(tmp_path)["kept"] == 1


def test_a_tokenizer_trains_on_lines_of_a_million_characters_without_a_space(tmp_path) -> None:
    # (The BPE trainer's time grows with the square of a word's length: tfm learns from such
    # runs in pieces, tfm.data.tokenizer.cut_long_words.)
    (tmp_path / "c.en").write_text("x" * 1_000_000 + "\nshort line\n")
    (tmp_path / "c.de").write_text("y" * 1_000_000 + "\nkurze Zeile\n")
    result = tfm("train-tokenizer", "--train", str(tmp_path / "c.en"), "--train",
                 str(tmp_path / "c.de"), "--vocab-size", "300", "-o", str(tmp_path / "t.json"))
    assert result.returncode == 0, result.stderr


def test_mixed_scripts_and_emoji_are_kept(tmp_path, tokenizer) -> None:
    result = prepare(tmp_path, tokenizer, "Tokyo 東京 🚆 Москва\n".encode(),
                     "Tokio 東京 🚆 Moskau\n".encode())
    assert result.returncode == 0, result.stderr
    assert report(tmp_path)["kept"] == 1


def test_a_missing_language_is_a_usage_error(tmp_path, tokenizer) -> None:
    refused(tfm("prepare", "--train", str(DEMO / "train"), "--tokenizer", str(tokenizer),
                "-o", str(tmp_path / "out")), 2, "--src-lang")


# --- models ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory, dataset: Path) -> Path:
    """A small model directory (2 steps on the shared demo dataset, its 400-entry BPE): the
    tests below break copies of it. Made in process: how it is made is not under test."""
    from tfm.config import ModelConfig, TrainConfig
    from tfm.training.loop import train

    output = tmp_path_factory.mktemp("model") / "model"
    train(dataset, output,
          ModelConfig(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64),
          TrainConfig(max_tokens=1024, max_steps=2, warmup_steps=1, valid_bleu=False,
                      precision="fp32", num_threads=1))
    return output


def copy_model(model: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "model"
    shutil.copytree(model, target, ignore=shutil.ignore_patterns("checkpoints", "*.pt"))
    return target


def test_a_missing_weights_file(model, tmp_path) -> None:
    broken = copy_model(model, tmp_path)
    (broken / "model.safetensors").unlink()
    refused(tfm("translate", "-m", str(broken), "Hi."), 4, "model.safetensors")


def test_a_truncated_weights_file(model, tmp_path) -> None:
    broken = copy_model(model, tmp_path)
    data = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(data[: len(data) // 2])
    refused(tfm("translate", "-m", str(broken), "Hi."), 4, "model.safetensors")


def test_a_foreign_weights_file(model, tmp_path) -> None:
    import torch
    from safetensors.torch import save_file

    broken = copy_model(model, tmp_path)
    save_file({"encoder.weight": torch.zeros(3, 3)}, broken / "model.safetensors")
    refused(tfm("translate", "-m", str(broken), "Hi."), 4, "do not match")


def test_a_pickle_in_place_of_the_weights_is_never_executed(model, tmp_path) -> None:
    import pickle

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    broken = copy_model(model, tmp_path)
    (broken / "model.safetensors").write_bytes(pickle.dumps(Payload()))
    refused(tfm("translate", "-m", str(broken), "Hi."), 4, "model.safetensors")
    assert not marker.exists()


def test_a_config_from_a_newer_format(model, tmp_path) -> None:
    broken = copy_model(model, tmp_path)
    config = json.loads((broken / "config.json").read_text())
    config["format_version"] = 99
    (broken / "config.json").write_text(json.dumps(config))
    refused(tfm("translate", "-m", str(broken), "Hi."), 4, "newer", "upgrade tfm")


def test_a_config_with_an_unknown_field(model, tmp_path) -> None:
    broken = copy_model(model, tmp_path)
    config = json.loads((broken / "config.json").read_text())
    config["model"]["rotary"] = True
    (broken / "config.json").write_text(json.dumps(config))
    refused(tfm("translate", "-m", str(broken), "Hi."), 4, "rotary")


def test_a_tokenizer_that_does_not_match_the_model(model, tmp_path) -> None:
    from tfm.data.tokenizer import save_tokenizer, train_tokenizer

    broken = copy_model(model, tmp_path)
    texts = (DEMO / "train.en").read_text().splitlines()
    save_tokenizer(train_tokenizer(texts, vocab_size=300), broken / "tokenizer.json")
    refused(tfm("translate", "-m", str(broken), "Hi."), 4, "does not belong to this model")


# --- translation input -----------------------------------------------------------------------

def test_hard_translation_input_is_handled(model) -> None:
    lines = ["", "   ", "word " * 2000, "Ünïcödé ✓ 🚀 東京 ∑ ℵ", "The dog."]
    # Outputs of at most 5 tokens: a 2-step model never stops, and would otherwise decode up to
    # its 1,024 positions for the long line; what is tested is the input's handling.
    result = tfm("translate", "-m", str(model), "-b", "2", "--max-len-a", "0",
                 "--max-len-b", "5", stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout.split("\n")
    assert len(out) == len(lines) + 1 and out[-1] == ""
    assert out[0] == "" and out[1] == ""
    assert "truncated" in result.stderr and "Traceback" not in result.stderr


def test_an_output_file_that_cannot_be_written_is_refused_before_any_work(model,
                                                                          tmp_path) -> None:
    # Found only at the end, a folder that does not exist would have cost the whole decoding.
    missing = tmp_path / "no-such-folder" / "out.txt"
    refused(tfm("translate", "-m", str(model), "Hi.", "--output", str(missing)), 2,
            "--output", "does not exist")
    refused(tfm("translate", "-m", str(model), "Hi.", "--output", str(tmp_path)), 2,
            "--output", "is a folder")
    src = tmp_path / "src.txt"
    src.write_text("Hi.\n", encoding="utf-8")
    refused(tfm("eval", "-m", str(model), "--src", str(src), "--ref", str(src),
                "--save-hyp", str(missing)), 2, "--save-hyp", "does not exist")
    assert not missing.parent.exists()
