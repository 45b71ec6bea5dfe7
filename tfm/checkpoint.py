"""Model directories: save and load a model with its tokenizer and config.json, weights in
safetensors, and the training state.

A model directory is self-contained (its files: tfm.layout); ``translate`` and ``eval`` need
nothing else. Weights are read only through safetensors, tied weights stored once, and the
training state only through ``torch.load(weights_only=True)``: loading a model never executes
code from it. Every file is written atomically (tfm.atomic) and its checksum recorded in
manifest.json (tfm.integrity); a model whose files differ from their checksums is refused.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from tfm.atomic import atomic_write_bytes, link_over
from tfm.data.tokenizer import Vocabularies, separate_paths, vocabulary_files
from tfm.errors import ModelError
from tfm.integrity import Manifest, digest
from tfm.layout import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, ModelDir
from tfm.model import Transformer
from tfm.model_info import ModelInfo, read_model_info

# --- weights ---------------------------------------------------------------------------------

def weights_to_bytes(model: torch.nn.Module, metadata: dict[str, str] | None = None) -> bytes:
    """safetensors bytes of the model's parameters; a tensor shared by several names (tied
    embeddings) is stored once, under its first name."""
    tensors: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        tensors[name] = tensor.detach().to("cpu").contiguous()
    return st_save(tensors, metadata=metadata)


def load_weights(model: Transformer, path: Path, data: bytes | None = None) -> None:
    """Load safetensors weights into ``model``, refusing anything that does not fit exactly.
    ``data``: the bytes of ``path``, where the caller has read them already."""
    try:
        tensors = st_load(Path(path).read_bytes() if data is None else data)
    except FileNotFoundError as e:
        raise ModelError(f"{path}: no such weights file") from e
    except (SafetensorError, ValueError, OSError) as e:
        raise ModelError(f"{path}: not a readable safetensors file ({e}); "
                         "the file may be truncated or foreign") from e
    expected = model.state_dict()
    aliases = _tied_aliases(model)
    missing = [k for k in expected if k not in tensors and k not in aliases]
    unexpected = [k for k in tensors if k not in expected]
    if missing or unexpected:
        detail = f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}"
        raise ModelError(f"{path}: weights do not match the model in config.json ({detail})")
    # Walk in the model's own order so the first mismatch named is the same on every run
    # (the order of a safetensors header is not guaranteed).
    for name in (k for k in expected if k in tensors):
        tensor = tensors[name]
        if tensor.shape != expected[name].shape:
            raise ModelError(
                f"{path}: {name} has shape {tuple(tensor.shape)} but config.json implies "
                f"{tuple(expected[name].shape)}"
            )
    model.load_state_dict(tensors, strict=False)


def _tied_aliases(model: torch.nn.Module) -> set[str]:
    """State-dict names that are second names of a shared tensor."""
    seen: set[int] = set()
    aliases = set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            aliases.add(name)
        seen.add(tensor.data_ptr())
    return aliases


# --- model directories -----------------------------------------------------------------------

def save_model_dir(directory: Path, model: Transformer, vocabs: Vocabularies | Any,
                   info: ModelInfo, weights_file: str = WEIGHTS_FILE) -> None:
    """Write (or update) a self-contained model directory. ``vocabs``: the model's
    Vocabularies, or one joint tokenizer."""
    from tfm.data.tokenizer import save_vocabularies

    directory = Path(directory)
    if not isinstance(vocabs, Vocabularies):
        vocabs = Vocabularies.shared(vocabs)
    tokenizer = directory / TOKENIZER_FILE
    manifest = Manifest.read(directory, strict=False)
    if manifest.forget([tokenizer, *separate_paths(tokenizer), directory / weights_file,
                        directory / CONFIG_FILE]):
        manifest.save()  # (a kill from here on leaves these files unchecked, never mischecked)
    for path in save_vocabularies(vocabs, tokenizer):
        manifest.record(path)
    weights = weights_to_bytes(model, {"format": "pt"})
    atomic_write_bytes(directory / weights_file, weights)
    manifest.record(directory / weights_file, weights)
    config = _config_bytes(info)
    atomic_write_bytes(directory / CONFIG_FILE, config)
    manifest.record(directory / CONFIG_FILE, config)
    manifest.save()


def save_model_info(files: ModelDir, info: ModelInfo) -> None:
    """Write (or replace) config.json."""
    save_recorded(files.root, {files.config: _config_bytes(info)})


def _config_bytes(info: ModelInfo) -> bytes:
    return (json.dumps(info.to_json(), indent=2, ensure_ascii=False) + "\n").encode()


def save_recorded(directory: Path, files: dict[Path, bytes], drop: Iterable[Path] = (),
                  keep_previous: dict[Path, Path] | None = None) -> None:
    """Write ``files`` (paths in ``directory``) atomically and record their checksums in its
    manifest.json; then delete the files ``drop`` (older checkpoints: only once the new files
    are complete). ``keep_previous`` maps a file to the name its current version keeps (a hard
    link, so it costs no copy) just before it is replaced."""
    directory = Path(directory)
    keep_previous = keep_previous or {}
    manifest = Manifest.read(directory, strict=False)
    entries = {target: manifest.files.get(manifest.name(source))
               for source, target in keep_previous.items()}
    # Unrecorded while they change: a kill leaves them unchecked, never mischecked.
    if manifest.forget([*files, *keep_previous.values()]):
        manifest.save()
    digests: dict[int, str] = {}
    for path, data in files.items():
        previous = keep_previous.get(path)
        if previous is not None and Path(path).exists():
            link_over(Path(path), Path(previous))
            if entries[previous] is not None:
                manifest.files[manifest.name(previous)] = entries[previous]
        atomic_write_bytes(path, data)
        if id(data) not in digests:  # the same weights go to several files: hashed once
            digests[id(data)] = digest(data)
        manifest.record(path, data, digests[id(data)])
    drop = list(drop)
    manifest.forget(drop)
    manifest.save()
    for path in drop:
        Path(path).unlink(missing_ok=True)


def load_model_dir(directory: Path, weights_file: str = WEIGHTS_FILE
                   ) -> tuple[Transformer, Vocabularies, ModelInfo]:
    """Model (in eval mode, on CPU), tokenizers and info from a model directory."""
    from tfm.data.tokenizer import load_vocabularies

    directory = Path(directory)
    info = read_model_info(directory)
    vocabs = load_vocabularies(directory / TOKENIZER_FILE)
    sizes = (vocabs.src.get_vocab_size(), vocabs.tgt.get_vocab_size())
    if sizes != (info.model.src_vocab_size, info.model.tgt_vocab_size):
        entries = f"{sizes[0]}" if vocabs.joint else f"{sizes[0]}/{sizes[1]}"
        raise ModelError(
            f"{directory}: the tokenizer has {entries} entries but the model was built for "
            f"{info.model.src_vocab_size}/{info.model.tgt_vocab_size}; "
            "the tokenizer does not belong to this model"
        )
    manifest = Manifest.read(directory)  # (an unreadable manifest is refused)
    weights = directory / weights_file
    try:
        data = weights.read_bytes()
    except FileNotFoundError as e:
        raise ModelError(f"{weights}: no such weights file") from e
    model = Transformer(info.model)
    load_weights(model, weights, data)
    # Checked after reading, so that a file that is not what it should be at all (truncated,
    # foreign) is named by what is wrong with it; this finds the damage that still parses.
    for path in [directory / CONFIG_FILE, *vocabulary_files(directory / TOKENIZER_FILE),
                 weights]:
        damage = manifest.damage(path, data if path == weights else None)
        if damage is not None:  # or a training run that rewrote it since: its new record
            fresh = Manifest.read(directory)
            if fresh.files.get(fresh.name(path)) != manifest.files.get(manifest.name(path)):
                damage = fresh.damage(path, data if path == weights else None)
        if damage is not None:
            raise ModelError(f"{path}: damaged since it was written ({damage}); the model is "
                             "refused. Restore it from a copy (if you edited it on purpose, "
                             f"delete {manifest.path.name})")
    model.eval()
    return model, vocabs, info


def train_state_bytes(state: dict[str, Any]) -> bytes:
    """Optimizer, schedule, RNG and data position: plain tensors and numbers only."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def load_train_state(path: Path, data: bytes | None = None) -> dict[str, Any]:
    """The training state in ``path`` (whose bytes are ``data``, where already read)."""
    try:
        source = path if data is None else io.BytesIO(data)
        return torch.load(source, map_location="cpu", weights_only=True)
    except FileNotFoundError as e:
        raise ModelError(f"{path}: no training state to resume from") from e
    except Exception as e:  # unpickling refusals and corrupt files raise many types
        raise ModelError(f"{path}: unreadable training state, refused ({str(e)[:200]})") from e
