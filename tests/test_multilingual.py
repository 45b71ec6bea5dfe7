"""One model, several directions: a toy multi-way corpus in three made-up languages
(tests/toy_languages.py) driven through one run config as a user drives it (train-tokenizer,
prepare, train), then translated in each direction, resumed bit-exactly, validated per
direction, exported, and fed bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import tfm
from safetensors.torch import load_file
from test_bad_inputs import refused
from toy_languages import write_corpus

from tfm.config import ModelConfig, TrainConfig
from tfm.errors import UsageError
from tfm.training.loop import resume, train
from tfm.training.state import Overrides

DIRECTIONS = ["aa-bb", "bb-aa", "aa-cc", "cc-aa"]
# The toy run's budget and its validations: enough for every direction to pass the exact
# match asked below with a wide margin (measured: docs/BENCHMARKS.md, the test suite).
STEPS, VALID_EVERY = 300, 75
VALIDATED = list(range(VALID_EVERY, STEPS + 1, VALID_EVERY))


def run_config(root: Path, **train_options: object) -> Path:
    """The run config of the toy run: one multi-way corpus read in four directions."""
    options = {"data": root / "data", "output": root / "model", "encoder_layers": 1,
               "decoder_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 128, "dropout": 0.0,
               "max_tokens": 1024, "lr": 5e-3, "warmup": 30, "lr_schedule": "linear",
               "max_steps": STEPS, "valid_every": VALID_EVERY, "save_every": VALID_EVERY,
               "keep_last": 0,
               "precision": "fp32", "device": "cpu", **train_options}
    train_lines = "".join(f"  {k}: {v}\n" for k, v in options.items())
    path = root / "run.yaml"
    path.write_text(f"""corpora:
  - train: {root / "corpus" / "train"}
    valid: {root / "corpus" / "valid"}
    directions: [{", ".join(DIRECTIONS)}]
train_tokenizer:
  vocab_size: 400
  output: {root / "tokenizer.json"}
prepare:
  tokenizer: {root / "tokenizer.json"}
  output: {root / "data"}
train:
{train_lines}""")
    return path


def ok(result) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def prepared_toy(root: Path) -> Path:
    """The toy corpus under ``root``, its tokenizer (with the tags) and its prepared data, as
    a user makes them from the run config; returns the config."""
    write_corpus(root / "corpus", "train", 1500, seed=1)
    write_corpus(root / "corpus", "valid", 40, seed=2)
    write_corpus(root / "corpus", "test", 60, seed=3)
    config = run_config(root)
    ok(tfm("train-tokenizer", "--config", str(config)))
    ok(tfm("prepare", "--config", str(config)))
    return config


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("multilingual")
    config = prepared_toy(root)
    result = tfm("train", "--config", str(config))
    ok(result)
    assert "Directions (by temperature 1): aa-bb 25.0% of 1,500 pairs" in result.stderr
    return root


def translate(root: Path, model: Path, src: str, tgt: str, *more: str) -> list[str]:
    out = ok(tfm("translate", "--model", str(model), "--target-lang", tgt, "--beam", "1",
                 "--input", str(root / "corpus" / f"test.{src}"), *more))
    return out.splitlines()


def exact_match(root: Path, hypotheses: list[str], tgt: str) -> float:
    references = (root / "corpus" / f"test.{tgt}").read_text().splitlines()
    return sum(h == r for h, r in zip(hypotheses, references)) / len(references)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_one_model_learns_every_direction_it_is_given(toy: Path, direction: str) -> None:
    src, tgt = direction.split("-")
    exact = exact_match(toy, translate(toy, toy / "model", src, tgt), tgt)
    print(f"{direction}: exact match {exact:.3f}")
    # Chance is nil: a sentence of 2-5 words out of 16 in the right language and order.
    assert exact >= 0.7, f"{direction}: exact match {exact:.2f}"


def test_the_model_names_its_directions_and_its_run_config(toy: Path) -> None:
    config = json.loads((toy / "model" / "config.json").read_text())
    assert config["directions"] == DIRECTIONS and config["tgt_lang"] is None
    prepared = json.loads((toy / "data" / "prepare.json").read_text())
    assert prepared["tags"] == [">>aa<<", ">>bb<<", ">>cc<<"]
    assert set(prepared["direction_splits"]["train"]) == set(DIRECTIONS)
    assert "d_model: 64" in (toy / "model" / "run.yaml").read_text()


def test_each_validation_scores_every_direction_and_the_best_is_their_macro_average(
        toy: Path) -> None:
    records = [json.loads(line) for line in (toy / "model" / "metrics.jsonl").open()]
    sampling = [r for r in records if r["kind"] == "sampling"]
    assert sampling and sampling[0]["probabilities"] == [0.25] * 4
    valid = [r for r in records if r["kind"] == "valid"]
    assert [r["step"] for r in valid] == VALIDATED
    for r in valid:
        assert set(r["directions"]) == set(DIRECTIONS)
        scores = [r["directions"][d]["bleu"] for d in DIRECTIONS]
        assert r["bleu"] == pytest.approx(sum(scores) / 4)
        assert all(0 <= r["directions"][d]["chrf"] <= 100 for d in DIRECTIONS)
    best = max(valid, key=lambda r: r["bleu"])
    provenance = json.loads((toy / "model" / "config.json").read_text())["provenance"]
    assert provenance["best_step"] == best["step"] and provenance["valid_bleu"] == best["bleu"]


def test_the_target_language_is_required_and_checked_in_one_line(toy: Path) -> None:
    model = str(toy / "model")
    refused(tfm("translate", "--model", model, "paku titu"), 2,
            "--target-lang is needed: this model translates into aa, bb, cc")
    refused(tfm("translate", "--model", model, "--target-lang", "de", "paku titu"), 2,
            "no >>de<< token", "aa, bb, cc")
    refused(tfm("translate", "--model", model, "--target-lang", "bb", "paku >>cc<< titu"), 2,
            "inside the sentence")
    # A sentence may name its own language instead, as OPUS-MT's users write it.
    own = ok(tfm("translate", "--model", model, "--beam", "1", ">>bb<< paku titu"))
    assert own == ok(tfm("translate", "--model", model, "--beam", "1", "--target-lang", "bb",
                         "paku titu"))


def test_a_multilingual_run_stopped_and_resumed_ends_with_identical_weights(
        toy: Path, tmp_path: Path) -> None:
    """With weights that draw the directions unevenly, each epoch's sample of pairs is a pure
    function of (data, seed, epoch): the resumed run sees exactly what the straight one saw."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(toy / "data", data)
    info = json.loads((data / "prepare.json").read_text())
    info["weights"] = [4.0, 1.0, 1.0, 2.0]  # as a config's corpora give them
    (data / "prepare.json").write_text(json.dumps(info))


    model = ModelConfig(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64,
                        dropout=0.1)
    config = TrainConfig(max_tokens=4096, max_steps=24, warmup_steps=4, valid_every=10**6,
                         valid_bleu=False, save_every=10**6, keep_last=0, precision="fp32",
                         device="cpu")
    straight = train(data, tmp_path / "straight", model, config)
    assert straight.epoch >= 1  # crossed an epoch: a second sample of the directions
    train(data, tmp_path / "resumed", model, replace(config, max_steps=10))
    resume(data, tmp_path / "resumed", Overrides.of(config, "max_steps"))
    a = load_file(tmp_path / "straight" / "last.safetensors")
    b = load_file(tmp_path / "resumed" / "last.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    sampling = [json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").open()
                if '"sampling"' in line][0]
    assert sampling["by"] == "weights" and sampling["probabilities"] == [0.5, 0.125, 0.125,
                                                                        0.25]
    with pytest.raises(UsageError, match="give one or the other"):  # weights or a temperature
        train(data, tmp_path / "both", model, replace(config, sampling_temperature=2.0))


@pytest.mark.parametrize("target", ["ctranslate2", "marian"])
def test_an_export_translates_each_direction_as_tfm_does(toy: Path, tmp_path: Path,
                                                         target: str) -> None:
    pytest.importorskip("ctranslate2" if target == "ctranslate2" else "transformers")
    ok(tfm("export", str(toy / "model"), "--to", target, "-o", str(tmp_path / "out")))
    for direction in DIRECTIONS:
        src, tgt = direction.split("-")
        # One length limit for both sides: 40 tokens, as generate() counts them.
        tfm_lines = translate(toy, toy / "model", src, tgt, "--max-len-a", "0",
                              "--max-len-b", "40")
        if target == "ctranslate2":  # tfm translate decodes the export with CTranslate2
            theirs = translate(toy, tmp_path / "out", src, tgt, "--max-len-a", "0",
                               "--max-len-b", "40")
        else:  # as a transformers user runs it: MarianTokenizer, MarianMTModel, greedy
            theirs = _marian_translate(tmp_path / "out", [
                f">>{tgt}<< {s}" for s in
                (toy / "corpus" / f"test.{src}").read_text().splitlines()])
        assert theirs == tfm_lines, direction


def _marian_translate(directory: Path, sentences: list[str]) -> list[str]:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.MarianMTModel.from_pretrained(directory).eval()
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    with torch.inference_mode():
        ids = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=40)
    return [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def test_bad_corpora_are_refused_in_one_line_and_nothing_is_written(toy: Path,
                                                                    tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    write_corpus(corpus, "train", 20, seed=5)
    (corpus / "empty.aa").write_text("\n\n")
    (corpus / "empty.cc").write_text("\n\n")
    tokenizer = toy / "tokenizer.json"

    def prepare(corpora: str) -> None:
        config = tmp_path / "bad.yaml"
        config.write_text(f"corpora:\n{corpora}tokenizer: {tokenizer}\n"
                          f"output: {tmp_path / 'out'}\n")
        return tfm("prepare", "--config", str(config))

    # A direction with no data.
    refused(prepare(f"  - train: {corpus / 'train'}\n    directions: [aa-bb]\n"
                    f"  - train: {corpus / 'empty'}\n    directions: [aa-cc]\n"), 3,
            "no pair of direction aa-cc is left")
    # A tag written inside a sentence of the corpus.
    lines = (corpus / "train.bb").read_text().splitlines()
    lines[6] = lines[6] + " >>cc<< " + lines[6]
    (corpus / "train.bb").write_text("\n".join(lines) + "\n")
    refused(prepare(f"  - train: {corpus / 'train'}\n    directions: [bb-aa]\n"), 3,
            "pair 7", ">>cc<<")
    # A direction into a language the tokenizer has no tag for.
    refused(prepare(f"  - train: {corpus / 'train'}\n    directions: [aa-dd]\n"), 2,
            "no >>dd<< tag")
    assert not (tmp_path / "out").exists()
    # The corpora in the config and on the command line at once.
    refused(tfm("prepare", "--config", str(run_config(toy)), "--train", str(corpus / "train"),
                "-o", str(tmp_path / "out")), 2, "--train and the config's corpora")
    assert not (tmp_path / "out").exists()


def test_the_learning_curve_draws_each_direction_beside_the_average(toy: Path) -> None:
    from tfm.plotting import learning_curve_figure, read_metrics

    figure = learning_curve_figure(read_metrics(toy / "model" / "metrics.jsonl"), "toy")
    labels = [line.get_label() for line in figure.axes[1].get_lines()]
    assert labels == ["valid BLEU (macro-average)", *DIRECTIONS]
    # each line draws its own series of metrics.jsonl, at the steps validated
    valid = [r for r in map(json.loads, (toy / "model" / "metrics.jsonl").read_text()
                            .splitlines()) if r["kind"] == "valid"]
    series = [[r["bleu"] for r in valid],
              *([r["directions"][d]["bleu"] for r in valid] for d in DIRECTIONS)]
    assert len(set(map(tuple, series))) == len(series)  # five series, told apart
    for line, expected in zip(figure.axes[1].get_lines(), series):
        assert list(line.get_xdata()) == [r["step"] for r in valid] == VALIDATED
        assert list(line.get_ydata()) == expected, line.get_label()


def test_the_server_names_the_directions_and_translates_as_the_command_line(toy: Path) -> None:
    """One request path: a request's target language reaches the model as --target-lang
    does, and is refused alike where it is missing."""
    pytest.importorskip("fastapi")
    import local_http
    from test_serve import post, serving

    from tfm.decoding.engines import load_translator
    from tfm.serve.app import create_app
    from tfm.serve.config import ServeConfig

    sentences = (toy / "corpus" / "test.aa").read_text().splitlines()[:5]
    cli = ok(tfm("translate", "--model", str(toy / "model"), "--target-lang", "cc", "--beam",
                 "2", *sentences)).splitlines()
    translator = load_translator(toy / "model", "cpu")
    with serving(create_app(translator, ServeConfig(max_wait_ms=0))) as url:
        info = local_http.get(f"{url}/v1/info").json()
        assert info["directions"] == DIRECTIONS
        assert info["language_tokens"] == [">>aa<<", ">>bb<<", ">>cc<<"]
        answer = post(url, {"text": sentences, "beam": 2, "target_lang": "cc"}, key=None)
        assert answer.status_code == 200, answer.text
        assert [t["text"] for t in answer.json()["translations"]] == cli
        missing = post(url, {"text": sentences[0]}, key=None)
        assert missing.status_code == 422 and "target_lang is needed" in missing.text
