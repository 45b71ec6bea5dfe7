"""How --help draws a command's options: typer's panels (``rich_help_panel``), each a table of
option, short option, negative spelling, value type and help, with the first four said as
briefly as they can be, so that the help column keeps its room.

Rich sizes each panel's table to its widest cell in every column and squeezes only the help
column, so at 80 columns one long cell in a panel (``--no-exact-search``, ``<list[Path]>``,
``<int> [x>=1]``) narrowed every option's help there to about 20 characters, one word a line.
Drawn here instead: a flag's two spellings in one cell (``--[no-]shortlist``), no value type
for a flag (it takes none), a repeatable option's value as one value (``<path>``; its help
says to repeat it) and a number's range beside its help. Only the copy --help draws is
changed: the options parse as declared.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
from typing import Any

import typer
from typer.core import TyperCommand, TyperOption

OTHER = "Other"  # the panel of a command's options that name none, where others do
# The order panels are drawn in, whatever the order of the options that name them (a panel not
# listed: before OTHER).
PANELS = ("Input and output", "Data and output", "Corpus", "Tokenizer", "Output", "Cleaning",
          "Model", "Dropout", "Optimisation", "Alignment", "Stopping", "Multilingual",
          "Checkpoints and logs", "Device", "Server", "Requests", "Batching", "Scores", "Search",
          "Sampling", "Reranking", "Constraints", "Languages", "Speed", OTHER)


class HelpCommand(TyperCommand):
    """A Typer command whose --help draws its options as this module says."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        drawn = copy.copy(self)
        drawn.help = reflowed(self.help)
        # Where the options are in panels, those in none (--config, --help) come last, as
        # OTHER: typer would draw them first, as "Options".
        rest = OTHER if any(getattr(p, "rich_help_panel", None) for p in self.params) else None
        drawn.params = sorted((shown(p, ctx, rest) for p in self.params), key=_panel_rank)
        help_option = self.get_help_option(ctx)
        drawn.get_help_option = lambda ctx: (  # type: ignore[method-assign]
            None if help_option is None else shown(help_option, ctx, rest))
        TyperCommand.format_help(drawn, ctx, formatter)


class App(typer.Typer):
    """A Typer app whose commands are HelpCommands unless they say otherwise, run from the click
    command it builds once."""

    def command(self, *args: Any, cls: type | None = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or HelpCommand, **kwargs)

    @functools.cached_property
    def click_command(self) -> Any:
        """The click command typer makes of this app (every command and option; the options'
        converters are made on first use). Typer makes it anew at each call; a process that
        runs several commands (the tests' preloader, tests/forked.py) makes it once."""
        return typer.main.get_command(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.click_command(*args, **kwargs)


def shown(param: Any, ctx: Any, rest: str | None = None) -> Any:
    """``param`` as --help draws it: a copy, for an option (in panel ``rest`` if it names
    none); an argument as it is."""
    if not isinstance(param, TyperOption):
        return param
    drawn = copy.copy(param)
    drawn.rich_help_panel = param.rich_help_panel or rest
    if param.is_flag:
        drawn.metavar = ""
        if param.secondary_opts and param.show_default:  # typer's words, said in the help
            default = (param.opts if param.default else param.secondary_opts)[0]
            drawn.help = f"{param.help or ''}  \\[default: {default.lstrip('-')}]".strip()
            drawn.show_default = False
        drawn.opts = [one_cell(param.opts, param.secondary_opts)] + [
            o for o in param.opts if not o.startswith("--")]
        drawn.secondary_opts = []
    elif param.metavar is None:  # <list[Path]> -> <path>, <int range> -> <int>
        label = param.display_type_rich(ctx) or ""
        one = re.fullmatch(r"<list\[(\w+)\]>|<(\w+) range>", label)
        if one:
            drawn.metavar = f"<{(one.group(1) or one.group(2)).lower()}>"
    if param.min is not None or param.max is not None:  # the range beside the help
        limits = param._get_number_range_help_str()
        drawn.min = drawn.max = None
        if limits:
            drawn.help = f"{param.help or ''}  \\[{limits}]".strip()
    return drawn


def _panel_rank(param: Any) -> float:
    panel = getattr(param, "rich_help_panel", None)
    if not isinstance(param, TyperOption) or panel is None:
        return -1
    return PANELS.index(panel) if panel in PANELS else PANELS.index(OTHER) - 0.5


def one_cell(opts: list[str], secondary: list[str]) -> str:
    """A flag's long spellings in one cell: ``--[no-]name`` for ``--name/--no-name``, else
    ``--one/`` over ``--other``."""
    long = [o for o in opts if o.startswith("--")]
    if len(long) == 1 and secondary == ["--no-" + long[0].removeprefix("--")]:
        return "--[no-]" + long[0].removeprefix("--")
    return "/\n".join(long + secondary)


def reflowed(text: str | None) -> str | None:
    """A command's help with each paragraph one line, for rich to wrap at the terminal's width
    (typer keeps a docstring's line breaks after the first paragraph: at 80 columns its
    source lines wrapped again, a word or two on every other line)."""
    if text is None:
        return None
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))
