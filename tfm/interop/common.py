"""What every export shares: an output directory that appears whole or not at all, and the
provenance file written beside the exported weights."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tfm import __version__
from tfm.atomic import write_error
from tfm.errors import ModelError, UsageError, WriteError

EXPORT_INFO_FILE = "tfm_export.json"


def check_new_output(source: Path, output: Path, what: str) -> None:
    """Refuse an ``output`` that is, or contains, ``source`` (``what`` names it: "the model
    directory being exported"): replacing it would delete what is being read."""
    src, out = Path(source).resolve(), Path(output).resolve()
    if out == src or out in src.parents:
        raise UsageError(f"{output} is (or contains) {what}; choose another -o")


def load_source(model_dir: Path, output: Path, what: str) -> tuple[Any, Any, Any]:
    """The model, vocabularies and ModelInfo of the tfm model directory an export, a trim or
    an added language reads, after refusing an ``output`` that would replace it (``what``:
    check_new_output's)."""
    from tfm.checkpoint import load_model_dir

    check_new_output(model_dir, output, what)
    return load_model_dir(model_dir)


@contextmanager
def staged_output(output: Path, overwrite: bool) -> Iterator[Path]:
    """A temporary directory beside ``output`` to write an export into; on success it is
    renamed to ``output`` (replacing it with ``overwrite``), on any failure removed, so that
    ``output`` is never left half-written."""
    output = Path(output)
    if output.exists() and not overwrite:
        raise UsageError(f"{output} already exists; give --overwrite to replace it, or "
                         "choose another -o")
    if output.exists() and not output.is_dir():
        raise UsageError(f"{output} exists and is not a directory")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".tmp",
                                      dir=output.parent))
    except OSError as e:
        raise (write_error(output, e, kept="nothing was written") or e) from e
    try:
        yield stage
        if output.exists():
            old = output.with_name(f".{output.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            output.rename(old)
            stage.rename(output)
            shutil.rmtree(old, ignore_errors=True)
        else:
            stage.rename(output)
    except Exception as e:  # (libraries that write with their own code raise other types)
        written = _bytes_under(stage)
        shutil.rmtree(stage, ignore_errors=True)
        kept = "the previous export is intact" if output.exists() else "nothing was written"
        fault = write_error(Path(getattr(e, "filename", None) or output), e, kept=kept)
        if fault is None:
            raise
        raise WriteError(f"{fault} The export had written {written / 1e6:.1f} MB of "
                         f"{output}.") from e
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _bytes_under(directory: Path) -> int:
    """The bytes of the files under ``directory``."""
    return sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())


def write_export_info(directory: Path, fmt: str, source: Path, info: Any,
                      **extra: Any) -> dict[str, Any]:
    """``tfm_export.json``: what was exported, from which model, by which tfm. ``info`` is the
    source's tfm.checkpoint.ModelInfo."""
    record = {
        "format": fmt,
        "source_model": Path(source).name,  # a name, never an absolute path
        **info.to_json(),  # the model's metadata as its config.json has it (ModelInfo.from_json)
        "tfm_version": __version__,
        **extra,
    }
    (Path(directory) / EXPORT_INFO_FILE).write_text(
        json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return record


def read_export_info(directory: Path) -> dict[str, Any] | None:
    """The export's ``tfm_export.json``, or None when ``directory`` has none."""
    path = Path(directory) / EXPORT_INFO_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def read_json(path: Path) -> Any:
    """The JSON file ``path`` of a checkpoint being imported, or None where there is none;
    one line where it is not JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: not readable JSON ({e})") from e
