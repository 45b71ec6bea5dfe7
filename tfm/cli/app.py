"""The ``tfm`` Typer application, its consoles, and the entry point that turns user errors into
one line on stderr and an exit code. Commands live in the modules beside this one, one module
per stage of the pipeline; each maps its options to one library call and prints the result."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tfm import __version__
from tfm.allocator import keep_freed_memory
from tfm.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OUT_OF_MEMORY, TfmError

app = typer.Typer(
    name="tfm",
    help="Train and use Transformer translation models.\n\n"
    "Typical run: train-tokenizer -> prepare -> train -> translate / eval.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
out = Console()  # results go to stdout
# Progress, reports and errors go to stderr. Written to a file or a pipe (a log), tables get
# room to show whole numbers instead of rich's 80 columns (COLUMNS, if set, still decides).
err = Console(stderr=True, soft_wrap=True,
              width=None if sys.stderr.isatty() or "COLUMNS" in os.environ else 160)


@app.callback()
def main(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option(
        "--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.")] = False,
) -> None:
    """Train and use Transformer translation models."""
    if version:
        out.print(f"tfm {__version__}")
        raise typer.Exit()
    ctx.obj = {"debug": debug}


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
        if debug:
            raise
        err.print(f"[bold red]internal error[/]: {type(e).__name__}: {escape(str(e))} "
                  "(run again with --debug for the traceback, and please report it)")
        sys.exit(EXIT_INTERNAL)
    sys.exit(code if isinstance(code, int) else 0)

