"""Specification of tfm.checkpoint: self-contained model directories that load back exactly,
atomic writes, clear refusals of anything that is not a model directory of this tfm, and
loading that never executes code from a file."""

from __future__ import annotations

import errno
import json
import os
import pickle
import shlex
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save as st_save
from tokenizers import Tokenizer

from tfm import __version__
from tfm.checkpoint import (
    atomic_write_bytes,
    load_model_dir,
    load_train_state,
    load_weights,
    save_model_dir,
    save_recorded,
    train_state_bytes,
    weights_to_bytes,
)
from tfm.config import GenerationDefaults, ModelConfig
from tfm.data.tokenizer import save_tokenizer, train_tokenizer
from tfm.errors import ModelError, ResourceError
from tfm.layout import CONFIG_FILE, MANIFEST_FILE, TOKENIZER_FILE, WEIGHTS_FILE
from tfm.model import Transformer
from tfm.model_info import FORMAT_VERSION, ModelInfo, read_model_info


def tiny_config(vocab: int, **overrides: object) -> ModelConfig:
    values: dict[str, object] = dict(
        src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16, n_heads=2, encoder_layers=1,
        decoder_layers=1, d_ff=32, max_positions=64, dropout=0.1)
    values.update(overrides)
    return ModelConfig(**values)  # type: ignore[arg-type]


def tiny_model(vocab: int, seed: int = 0, **overrides: object) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny_config(vocab, **overrides))


def outputs(model: Transformer) -> torch.Tensor:
    """Logits for a fixed padded batch, in eval mode."""
    model.eval()
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    tgt_in = torch.tensor([[2, 11, 12, 13], [2, 14, 0, 0]])
    with torch.no_grad():
        return model(src, tgt_in)


def weight_names(path: Path) -> set[str]:
    with safe_open(str(path), framework="pt") as f:
        return set(f.keys())


class Payload:
    """Unpickling this runs a shell command that creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., object], tuple[str]]:
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


@pytest.fixture
def model_dir(tmp_path: Path, tokenizer: Tokenizer) -> Path:
    """A saved model directory with a tiny model for the session tokenizer."""
    directory = tmp_path / "model"
    model = tiny_model(tokenizer.get_vocab_size())
    info = ModelInfo(model.config, src_lang="en", tgt_lang="de", provenance={"seed": 1})
    save_model_dir(directory, model, tokenizer, info)
    return directory


def edit_config(directory: Path, change: Callable[[dict], None]) -> None:
    path = directory / CONFIG_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


# ---------------------------------------------------------------------------- model directories


def test_a_saved_model_directory_loads_back_with_identical_outputs(
    tmp_path: Path, tokenizer: Tokenizer,
) -> None:
    model = tiny_model(tokenizer.get_vocab_size(), seed=3)
    info = ModelInfo(model.config, src_lang="en", tgt_lang="de",
                     generation=GenerationDefaults(beam=4, max_len_b=7),
                     provenance={"seed": 3, "data_fingerprint": "abc"})
    save_model_dir(tmp_path / "model", model, tokenizer, info)
    assert {p.name for p in (tmp_path / "model").iterdir()} == {
        CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, MANIFEST_FILE}

    loaded, loaded_tok, loaded_info = load_model_dir(tmp_path / "model")
    assert not loaded.training  # eval mode
    assert torch.equal(outputs(loaded), outputs(model))
    assert loaded_info == info
    assert loaded_tok.joint
    assert loaded_tok.src.get_vocab_size() == tokenizer.get_vocab_size()
    text = ["Der Hund fängt den Ball ."]
    assert loaded_tok.src.encode_batch(text)[0].ids == tokenizer.encode_batch(text)[0].ids


def test_a_fresh_model_gives_other_outputs(tokenizer: Tokenizer) -> None:
    # Guards the test above: identical outputs are not a matter of course.
    vocab = tokenizer.get_vocab_size()
    assert not torch.equal(outputs(tiny_model(vocab, seed=1)), outputs(tiny_model(vocab, seed=2)))


def test_config_json_records_versions_architecture_and_languages(model_dir: Path) -> None:
    data = json.loads((model_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    # format 1: the model uses nothing of format 2 (tfm.checkpoint.FORMAT_VERSION), so tfm
    # versions before it still read it
    assert data["format_version"] == 1 < FORMAT_VERSION
    assert data["tfm_version"] == __version__
    assert data["model"]["d_model"] == 16
    assert (data["src_lang"], data["tgt_lang"]) == ("en", "de")
    assert data["generation"] == {"beam": 5, "length_penalty": 1.0, "max_len_a": 1.5,
                                  "max_len_b": 10}
    assert str(model_dir) not in json.dumps(data)


def test_tied_weights_are_stored_once(model_dir: Path) -> None:
    names = weight_names(model_dir / WEIGHTS_FILE)
    assert "src_embed.token.weight" in names
    assert "tgt_embed.token.weight" not in names
    assert "output_proj.weight" not in names
    with safe_open(str(model_dir / WEIGHTS_FILE), framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
    model, _, _ = load_model_dir(model_dir)
    # Loading keeps the tying: one matrix under three names.
    assert model.output_proj.weight is model.tgt_embed.token.weight
    assert model.src_embed.token.weight is model.tgt_embed.token.weight


@pytest.mark.parametrize(("share", "tie", "stored"), [
    (False, True, {"src_embed.token.weight", "tgt_embed.token.weight"}),
    (True, False, {"src_embed.token.weight", "output_proj.weight"}),
    (False, False, {"src_embed.token.weight", "tgt_embed.token.weight", "output_proj.weight"}),
])
def test_untied_weights_are_each_stored(
    tmp_path: Path, tokenizer: Tokenizer, share: bool, tie: bool, stored: set[str],
) -> None:
    model = tiny_model(tokenizer.get_vocab_size(), share_embeddings=share, tie_output=tie)
    save_model_dir(tmp_path / "m", model, tokenizer, ModelInfo(model.config))
    names = weight_names(tmp_path / "m" / WEIGHTS_FILE)
    embeddings = {n for n in names if "embed" in n or "output_proj" in n}
    assert embeddings == stored
    loaded, _, _ = load_model_dir(tmp_path / "m")
    assert torch.equal(outputs(loaded), outputs(model))


def test_weights_to_bytes_stores_every_parameter_of_the_model(tokenizer: Tokenizer,
                                                              tmp_path: Path) -> None:
    model = tiny_model(tokenizer.get_vocab_size())
    path = tmp_path / "w.safetensors"
    path.write_bytes(weights_to_bytes(model, {"step": "7"}))
    stored = weight_names(path)
    assert stored <= set(model.state_dict())
    assert sum(p.numel() for p in model.parameters()) == sum(
        model.state_dict()[n].numel() for n in stored)
    other = tiny_model(tokenizer.get_vocab_size(), seed=9)
    load_weights(other, path)
    assert torch.equal(outputs(other), outputs(model))


def test_saving_again_updates_the_directory(
    model_dir: Path, tokenizer: Tokenizer,
) -> None:
    model = tiny_model(tokenizer.get_vocab_size(), seed=5)
    save_model_dir(model_dir, model, tokenizer,
                   ModelInfo(model.config, src_lang="de", tgt_lang="en"))
    loaded, _, info = load_model_dir(model_dir)
    assert torch.equal(outputs(loaded), outputs(model))
    assert (info.src_lang, info.tgt_lang) == ("de", "en")
    assert sorted(p.name for p in model_dir.iterdir()) == sorted(
        [CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, MANIFEST_FILE])  # no temporaries left


def test_another_weights_file_can_be_saved_and_loaded(
    model_dir: Path, tokenizer: Tokenizer,
) -> None:
    model = tiny_model(tokenizer.get_vocab_size(), seed=8)
    save_model_dir(model_dir, model, tokenizer, ModelInfo(model.config),
                   weights_file="averaged.safetensors")
    loaded, _, _ = load_model_dir(model_dir, weights_file="averaged.safetensors")
    assert torch.equal(outputs(loaded), outputs(model))


# ---------------------------------------------------------------------------- refusals


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"no-model: no such model directory"):
        load_model_dir(tmp_path / "no-model")


def test_a_directory_without_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi", encoding="utf-8")
    with pytest.raises(ModelError, match=r"not a tfm model directory \(no config\.json\)"):
        load_model_dir(tmp_path)


@pytest.mark.parametrize("content", ["{ not json", "[1, 2]", '{"model": {}}', "\udcff"])
def test_a_config_that_is_not_a_tfm_config_is_refused(model_dir: Path, content: str) -> None:
    (model_dir / CONFIG_FILE).write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(ModelError, match=r"config\.json: not (valid JSON|a tfm model config)"):
        load_model_dir(model_dir)


def test_a_newer_format_version_is_refused(model_dir: Path) -> None:
    edit_config(model_dir, lambda d: d.update(format_version=FORMAT_VERSION + 1))
    with pytest.raises(ModelError, match=rf"model format version {FORMAT_VERSION + 1} is newer "
                                         r"than this tfm understands .*upgrade tfm"):
        load_model_dir(model_dir)


def test_a_config_without_a_format_version_is_refused_by_the_one_check(model_dir: Path
                                                                      ) -> None:
    """The format-version check is ModelInfo.from_json's alone, for config.json and
    tfm_export.json alike: a config without a version is not taken for format 1."""
    data = json.loads((model_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    del data["format_version"]
    with pytest.raises(ModelError, match=r"tfm_export\.json: not a tfm model config"):
        ModelInfo.from_json(data, "tfm_export.json")
    edit_config(model_dir, lambda d: d.pop("format_version"))
    with pytest.raises(ModelError, match=r"config\.json: not a tfm model config"):
        read_model_info(model_dir)


def test_model_info_takes_its_fields_after_the_model_by_name(model_dir: Path) -> None:
    info = read_model_info(model_dir)
    with pytest.raises(TypeError):
        ModelInfo(info.model, "en", "de")  # type: ignore[misc]
    assert ModelInfo(info.model, src_lang="en", tgt_lang="de").tgt_lang == "de"


def test_an_unknown_model_field_is_refused(model_dir: Path) -> None:
    edit_config(model_dir, lambda d: d["model"].update(rotary_embeddings=True))
    with pytest.raises(ModelError, match=r"invalid model config .*rotary_embeddings"):
        load_model_dir(model_dir)


def test_an_invalid_model_config_is_refused(model_dir: Path) -> None:
    edit_config(model_dir, lambda d: d["model"].update(n_heads=3))  # 16 % 3 != 0
    with pytest.raises(ModelError, match=r"invalid model config .*divisible"):
        load_model_dir(model_dir)


def test_an_unknown_generation_field_is_refused(model_dir: Path) -> None:
    edit_config(model_dir, lambda d: d["generation"].update(top_k=5))
    with pytest.raises(ModelError, match=r"invalid model config"):
        read_model_info(model_dir)


def test_a_truncated_weights_file_is_refused(model_dir: Path) -> None:
    path = model_dir / WEIGHTS_FILE
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match=r"model\.safetensors: not a readable safetensors file "
                                         r".*truncated or foreign"):
        load_model_dir(model_dir)


def test_a_missing_weights_file_is_refused(model_dir: Path) -> None:
    (model_dir / WEIGHTS_FILE).unlink()
    with pytest.raises(ModelError, match=r"model\.safetensors: no such weights file"):
        load_model_dir(model_dir)


def test_a_missing_tokenizer_is_refused(model_dir: Path) -> None:
    (model_dir / TOKENIZER_FILE).unlink()
    with pytest.raises(ModelError, match=r"tokenizer\.json: no such tokenizer file"):
        load_model_dir(model_dir)


def test_foreign_tensor_names_are_refused(model_dir: Path) -> None:
    foreign = {"bert.embeddings.word_embeddings.weight": torch.zeros(300, 16),
               "classifier.bias": torch.zeros(2)}
    (model_dir / WEIGHTS_FILE).write_bytes(st_save(foreign))
    with pytest.raises(ModelError, match=r"weights do not match the model in config\.json "
                                         r"\(missing \["):
        load_model_dir(model_dir)


def test_extra_tensors_are_refused(model_dir: Path, tokenizer: Tokenizer) -> None:
    tensors = dict(tiny_model(tokenizer.get_vocab_size()).state_dict())
    del tensors["tgt_embed.token.weight"], tensors["output_proj.weight"]
    tensors["decoder_layers.7.ffn.fc1.weight"] = torch.zeros(2, 2)
    (model_dir / WEIGHTS_FILE).write_bytes(st_save(tensors))
    with pytest.raises(ModelError, match=r"\(unexpected \['decoder_layers\.7\.ffn\.fc1\.weight'"):
        load_model_dir(model_dir)


def test_tensors_of_other_shapes_are_refused(model_dir: Path, tokenizer: Tokenizer) -> None:
    bigger = tiny_model(tokenizer.get_vocab_size(), d_model=32, d_ff=64)
    (model_dir / WEIGHTS_FILE).write_bytes(weights_to_bytes(bigger))
    with pytest.raises(ModelError, match=r"has shape \(.*\) but config\.json implies \(.*16"):
        load_model_dir(model_dir)


def test_a_tokenizer_of_another_size_is_refused(
    model_dir: Path, sentence_pairs: list[tuple[str, str]],
) -> None:
    other = train_tokenizer([t for pair in sentence_pairs for t in pair], vocab_size=280)
    save_tokenizer(other, model_dir / TOKENIZER_FILE)
    size = other.get_vocab_size()
    with pytest.raises(ModelError, match=rf"the tokenizer has {size} entries but the model was "
                                         r"built for 300/300; the tokenizer does not belong"):
        load_model_dir(model_dir)


# ---------------------------------------------------------------------------- no code execution


def test_a_pickled_payload_in_the_training_state_is_refused_unexecuted(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "state.pt"
    torch.save({"step": 1, "payload": Payload(marker)}, path)
    with pytest.raises(ModelError, match=r"state\.pt: unreadable training state, refused"):
        load_train_state(path)
    assert not marker.exists()


def test_a_plain_pickle_payload_is_refused_unexecuted(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "state.pt"
    path.write_bytes(pickle.dumps({"payload": Payload(marker)}, protocol=2))
    with pytest.raises(ModelError, match="refused"):
        load_train_state(path)
    assert not marker.exists()


def test_the_payload_would_run_if_unpickled(tmp_path: Path) -> None:
    # Guards the two tests above: the marker is really created by an unrestricted load.
    marker = tmp_path / "pwned"
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()


@pytest.mark.parametrize("writer", ["pickle", "torch"])
def test_a_pickle_named_model_safetensors_is_refused_unexecuted(
    model_dir: Path, tmp_path: Path, writer: str,
) -> None:
    marker = tmp_path / "pwned"
    path = model_dir / WEIGHTS_FILE
    if writer == "pickle":
        path.write_bytes(pickle.dumps({"src_embed.token.weight": Payload(marker)}))
    else:
        torch.save({"src_embed.token.weight": Payload(marker)}, path)
    with pytest.raises(ModelError, match=r"not a readable safetensors file"):
        load_model_dir(model_dir)
    assert not marker.exists()


def test_training_state_round_trips_tensors_numbers_and_optimizer_state(
    tmp_path: Path, tokenizer: Tokenizer,
) -> None:
    model = tiny_model(tokenizer.get_vocab_size())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
    src, tgt_in = torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7]])
    model(src, tgt_in).logsumexp(-1).sum().backward()
    optimizer.step()
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": torch.get_rng_state(),
        "model_config": {"d_model": 16, "norm_first": False},
        "run": {"step": 12, "epoch": 1, "best_bleu": None, "saved_steps": [10, 12]},
    }
    path = tmp_path / "state.pt"
    save_recorded(tmp_path, {path: train_state_bytes(state)})  # as the training loop saves it
    loaded = load_train_state(path)
    assert loaded["run"] == state["run"]
    assert loaded["model_config"] == state["model_config"]
    assert torch.equal(loaded["rng"], state["rng"])
    for name, tensor in state["model"].items():
        assert torch.equal(loaded["model"][name], tensor)
    restored = torch.optim.Adam(model.parameters(), lr=1e-3)
    restored.load_state_dict(loaded["optimizer"])
    assert restored.state_dict()["param_groups"] == optimizer.state_dict()["param_groups"]


def test_a_missing_training_state_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"state\.pt: no training state to resume from"):
        load_train_state(tmp_path / "state.pt")


def test_a_corrupt_training_state_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.pt"
    save_recorded(tmp_path, {path: train_state_bytes({"step": torch.arange(1000)})})
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(ModelError, match=r"unreadable training state, refused"):
        load_train_state(path)


# ---------------------------------------------------------------------------- atomic writes


def test_atomic_write_creates_and_replaces_a_file(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "file.bin"
    atomic_write_bytes(path, b"first")
    assert path.read_bytes() == b"first"
    atomic_write_bytes(path, b"second, longer")
    assert path.read_bytes() == b"second, longer"
    atomic_write_bytes(path, b"")
    assert path.read_bytes() == b""
    assert [p.name for p in path.parent.iterdir()] == ["file.bin"]


def test_atomic_write_makes_a_world_readable_file(tmp_path: Path) -> None:
    old_umask = os.umask(0o077)
    try:
        atomic_write_bytes(tmp_path / "config.json", b"{}")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "config.json").stat().st_mode) == 0o644


def fail_with(code: int) -> Callable[..., None]:
    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))
    return fail


@pytest.mark.parametrize("function", ["fsync", "replace"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_leaves_the_previous_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, function: str, code: int,
) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"previous")
    monkeypatch.setattr(os, function, fail_with(code))
    with pytest.raises(ResourceError, match=r"model\.safetensors: no space left on the device; "
                                            r"the previous file is intact") as info:
        atomic_write_bytes(path, b"new content")
    assert isinstance(info.value.__cause__, OSError)
    monkeypatch.undo()
    assert path.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]


def test_a_full_disk_when_creating_the_temporary_file_is_a_resource_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"previous")
    monkeypatch.setattr("tempfile.mkstemp", fail_with(errno.ENOSPC))
    with pytest.raises(ResourceError, match="no space left"):
        atomic_write_bytes(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"previous"


def test_a_full_disk_while_writing_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"previous")
    real_fdopen = os.fdopen

    class HalfWriter:
        def __init__(self, fd: int, mode: str) -> None:
            self.file = real_fdopen(fd, mode)

        def __enter__(self) -> HalfWriter:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def fileno(self) -> int:
            return self.file.fileno()

        def write(self, data: bytes) -> None:
            self.file.write(data[: len(data) // 2])
            self.file.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", HalfWriter)
    with pytest.raises(ResourceError, match="no space left"):
        atomic_write_bytes(path, b"x" * 1000)
    monkeypatch.undo()
    assert path.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]


def test_other_write_errors_are_not_reported_as_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"previous")
    monkeypatch.setattr(os, "replace", fail_with(errno.EIO))
    with pytest.raises(OSError) as info:
        atomic_write_bytes(path, b"new")
    assert not isinstance(info.value, ResourceError)
    assert info.value.errno == errno.EIO
    monkeypatch.undo()
    assert path.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_an_interrupted_write_leaves_the_previous_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"previous")

    def interrupt(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_a_full_disk_while_saving_a_model_keeps_the_previous_weights(
    model_dir: Path, tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    before, _, _ = load_model_dir(model_dir)
    expected = outputs(before)
    model = tiny_model(tokenizer.get_vocab_size(), seed=11)
    monkeypatch.setattr(os, "replace", fail_with(errno.ENOSPC))
    with pytest.raises(ResourceError, match="no space left"):
        save_model_dir(model_dir, model, tokenizer, ModelInfo(model.config))
    monkeypatch.undo()
    after, _, _ = load_model_dir(model_dir)
    assert torch.equal(outputs(after), expected)
    assert not [p for p in model_dir.iterdir() if p.name.startswith(".")]
