"""The ``tfm`` Typer application, its consoles, and the entry point that turns user errors into
one line on stderr and an exit code. Commands live in the modules beside this one, one module
per stage of the pipeline; each maps its options to one library call and prints the result."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tfm import __version__
from tfm.allocator import keep_freed_memory
from tfm.cli.help_layout import App
from tfm.collector import keep_imports_out_of_collections
from tfm.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OUT_OF_MEMORY,
    TfmError,
    UsageError,
)

app = App(
    name="tfm",
    help="Train and use Transformer translation models.\n\n"
    "Typical run: train-tokenizer -> prepare -> train -> translate / eval.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
out = Console()  # results go to stdout
err = Console(stderr=True, soft_wrap=True)  # progress, reports and errors; its width: run()


def log_width() -> int | None:
    """The width of ``err`` for this process: written to a file or a pipe (a log), tables get
    room to show whole numbers instead of rich's 80 columns; on a terminal, or with COLUMNS
    set, rich decides (None)."""
    return None if sys.stderr.isatty() or "COLUMNS" in os.environ else 160


def _print_version(asked: bool) -> None:
    """--version: handled as soon as it is read (eager), so that it needs no command."""
    if asked:
        out.print(f"tfm {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option(
        "--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", callback=_print_version,
        is_eager=True)] = False,
) -> None:
    """Train and use Transformer translation models."""
    ctx.obj = {"debug": debug}


@contextmanager
def writing_into(directory: Path, command: str) -> Iterator[None]:
    """Hold the lock of ``directory`` (tfm.lock) while the block writes into it: a second command
    into the same directory is refused with one line naming this one (exit 2). Every command
    that writes a directory wraps its library call in this, e.g.
    ``with writing_into(output, "tfm import"): ...``."""
    from tfm.lock import directory_lock

    with directory_lock(directory, command,
                        lambda m: err.print(f"[yellow]warning[/]: {escape(m)}", highlight=False)):
        yield


def check_output_file(path: Path | None, option: str) -> None:
    """Refuse, before any work, an output file that could not be written: one in a folder that
    does not exist, or a folder itself (found only at the end, such a path would cost the
    work done before it)."""
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"{option} {path} is a folder; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: the folder {parent} does not exist; create it "
                         "first")


def _is_click_error(e: Exception) -> bool:
    """Click's own errors, from click or from the copy of click that newer typer vendors."""
    import click

    vendored = getattr(getattr(typer, "_click", None), "exceptions", None)
    types = (click.ClickException,) + ((vendored.ClickException,) if vendored else ())
    return isinstance(e, types)


def run() -> None:
    """Entry point: user errors become one line on stderr and an exit code."""
    debug = "--debug" in sys.argv[1:]
    keep_freed_memory()
    keep_imports_out_of_collections()
    err.width = log_width()  # decided when the command runs, not when this module was imported
    try:
        code = app(standalone_mode=False)
    except TfmError as e:
        if debug:
            raise
        # escaped: a message may hold brackets, e.g. pip install "tfm[export]"
        err.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        if debug:
            raise
        err.print("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:  # click usage errors and the like
        if _is_click_error(e):  # bad command-line syntax: click prints usage and the error
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, MemoryError):
            err.print("[bold red]error[/]: out of memory; lower --max-tokens")
            sys.exit(EXIT_OUT_OF_MEMORY)
        fault = _write_fault(e)
        if fault is not None and not debug:  # a write no library call wrapped (--output FILE)
            err.print(f"[bold red]error[/]: {escape(str(fault))}", highlight=False,
                      soft_wrap=True)
            sys.exit(fault.exit_code)
        if debug:
            raise
        err.print(f"[bold red]internal error[/]: {type(e).__name__}: {escape(str(e))} "
                  "(run again with --debug for the traceback, and please report it)")
        sys.exit(EXIT_INTERNAL)
    sys.exit(code if isinstance(code, int) else 0)


def _write_fault(e: Exception) -> TfmError | None:
    """A full disk, read-only file system or missing permission on a named file, in the words
    of tfm.atomic.write_error; None for anything else."""
    from tfm.atomic import write_error

    if not isinstance(e, OSError):
        return None
    return write_error(Path(e.filename or "the output"), e,
                       kept="what was written before is intact")

