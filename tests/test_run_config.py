"""Run configs: a command's options in a YAML file (``--config``), keyed by the options' own
names, the command line over it, unknown keys refused in one line, and the resolved config
kept with a training run so that the run can be repeated from it (tfm.cli.run_config)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from conftest import tfm
from safetensors.torch import load_file
from test_bad_inputs import refused

DEMO = Path(__file__).resolve().parent.parent / "data" / "demo"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def prepared_clean(output: Path) -> dict:
    return json.loads((output / "prepare.json").read_text())["clean"]


def test_options_come_from_the_file_and_the_command_line_wins(
        tmp_path: Path, tokenizer_path: Path) -> None:
    config = write(tmp_path / "run.yaml", f"""
train: {DEMO / "train"}
valid: {DEMO / "valid"}
src_lang: en
tgt-lang: de          # either spelling of a name
tokenizer: {tokenizer_path}
max_length: 40
dedup: true
""")
    result = tfm("prepare", "--config", str(config), "-o", str(tmp_path / "a"))
    assert result.returncode == 0, result.stderr
    assert prepared_clean(tmp_path / "a") == {"max_length": 40, "max_ratio": 3.0, "dedup": True}
    result = tfm("prepare", "--config", str(config), "-o", str(tmp_path / "b"),
                 "--max-length", "60", "--no-dedup")
    assert result.returncode == 0, result.stderr
    assert prepared_clean(tmp_path / "b") == {"max_length": 60, "max_ratio": 3.0, "dedup": False}


def test_an_unknown_key_is_refused_naming_the_nearest_and_nothing_is_written(
        tmp_path: Path, tokenizer_path: Path) -> None:
    config = write(tmp_path / "run.yaml", f"train: {DEMO / 'train'}\nsrc_lang: en\n"
                   f"tgt_lang: de\ntokenizer: {tokenizer_path}\nmax_lenght: 40\n")
    line = refused(tfm("prepare", "--config", str(config), "-o", str(tmp_path / "out")), 2,
                   "unknown key 'max_lenght'", "did you mean max_length?", str(config))
    assert line.startswith("error:")
    assert not (tmp_path / "out").exists()
    # In a command's own section, only that command's options.
    sectioned = write(tmp_path / "s.yaml", "prepare:\n  dedupe: true\n")
    refused(tfm("prepare", "--config", str(sectioned)), 2, "'prepare: dedupe'",
            "did you mean dedup?")
    refused(tfm("prepare", "--config", str(write(tmp_path / "n.yaml", "zzz: 1\n"))), 2,
            "unknown key 'zzz'", "tfm prepare --help")


def test_one_file_drives_several_commands_each_taking_its_keys(
        tmp_path: Path, dataset: Path) -> None:
    """Top-level keys go to every command that has them and are left by the others; a section
    named after a command is for it alone, over the top level."""
    config = write(tmp_path / "run.yaml", f"""
seed: 3
beam: 2                     # a key of translate's: left by train
output: {tmp_path / "model"}  # train's (and prepare's, but for its section)
prepare:
  output: {tmp_path / "unused"}  # prepare's alone: train, which has --output, leaves it
train:
  data: {dataset}
  preset: tiny
  max_steps: 2
  valid_every: 2
  seed: 4                   # the section wins
""")
    result = tfm("train", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "unused").exists()
    assert json.loads((tmp_path / "model" / "train_config.json").read_text())["seed"] == 4


def test_a_config_that_is_not_yaml_or_not_a_mapping_is_one_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", "max_tokens: [1\n")
    refused(tfm("train", "--config", str(bad)), 2, "not valid YAML", "line")
    refused(tfm("train", "--config", str(write(tmp_path / "list.yaml", "- 1\n- 2\n"))), 2,
            "give a mapping")
    refused(tfm("train", "--config", str(tmp_path / "missing.yaml")), 2, "no such file")
    refused(tfm("train", "--config", str(write(tmp_path / "t.yaml", "pre_norm: maybe\n"))), 2,
            "pre_norm")


def test_a_run_repeats_from_the_config_it_kept(tmp_path: Path, dataset: Path) -> None:
    """config -> run -> the resolved config in the model directory -> the same run."""
    config = write(tmp_path / "first.yaml", f"""
data: {dataset}
output: {tmp_path / "first"}
preset: tiny
encoder_layers: 1
post_norm: true
warmup: 3
max_steps: 4
valid_every: 2
seed: 7
""")
    result = tfm("train", "--config", str(config), "--max-tokens", "512")
    assert result.returncode == 0, result.stderr
    kept = tmp_path / "first" / "run.yaml"
    text = kept.read_text()
    assert "max_tokens: 512" in text and "encoder_layers: 1" in text and "d_model: 128" in text
    assert "warmup_steps: 3" in text and "norm_first: false" in text
    again = tfm("train", "--config", str(kept), "--output", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    first = load_file(tmp_path / "first" / "model.safetensors")
    second = load_file(tmp_path / "again" / "model.safetensors")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert (tmp_path / "again" / "run.yaml").read_text() == text.replace(
        str(tmp_path / "first"), str(tmp_path / "again"))
