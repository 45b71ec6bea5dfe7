"""--help reads at 80 columns: every command's options in panels whose help column is wide
enough to read (40 characters or more), translate's help (the longest) within 153 lines, and
each command's summary in `tfm --help` on one line.

All of it drawn in this process by typer's CliRunner, with COLUMNS=80 (rich reads it when
typer makes the help's console, inside the call).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from tfm.cli.app import app

WIDTH = 80
NARROWEST_HELP = 40  # characters of the help column, the narrowest allowed
LONGEST = {"translate": 153}  # lines: half of the 306 its help took before the panels

CLICK = typer.main.get_command(app)
COMMANDS = sorted(CLICK.commands)  # type: ignore[attr-defined]
CLI_MD = Path(__file__).resolve().parent.parent / "docs" / "CLI.md"


def rendered(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(WIDTH)},
                                color=False)
    assert result.exit_code == 0, result.output
    return result.output


HELP = {command: rendered(command) for command in COMMANDS}


def panels(text: str) -> dict[str, list[str]]:
    """The inside of each panel (╭─ Title ─╮ ... ╰─╯) by title: its lines without the border
    and the space on either side of it."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("╭"):
            title = line.strip("╭╮─ ")
            current = found.setdefault(title, [])
        elif line.startswith("╰"):
            current = None
        elif current is not None:
            assert line.startswith("│ ") and line.endswith(" │"), line
            current.append(line[2:-2])
    return found


def cell_starts(line: str) -> set[int]:
    """Where the cells of a table line start: the table pads its columns with a space on each
    side, so cells are two spaces or more apart (a "[default: ...]" two spaces after the help
    text is part of it)."""
    starts = set()
    for m in re.finditer(r"(?:^|(?<=  ))(\S)", line):
        if not (m.group(1) == "[" and m.start() > 0 and line[:m.start()].strip()):
            starts.add(m.start())
    return starts


def help_column(lines: list[str]) -> int:
    """The width of a panel's help column (its last): it starts where every line of the
    panel has a cell start, rows' first lines and wrapped help lines alike."""
    common = set.intersection(*(cell_starts(line) for line in lines if line.strip()))
    assert common, lines
    return len(lines[0]) - max(common)


def test_every_command_is_measured() -> None:
    assert {"translate", "eval", "serve", "train", "prepare"} <= set(COMMANDS)
    for command in COMMANDS:
        assert panels(HELP[command]), HELP[command]


def test_panels_are_parsed() -> None:
    # the measure itself, on lines shaped like rich's
    lines = ["--beam  -b  <int>  Beam size; 1 is greedy.",
             "--mbr       <str>  Beam search: the hypothesis  [default: 5]",
             "                   the others agree with."]
    assert help_column([line.ljust(60) for line in lines]) == 60 - 19
    assert help_column(["--x  <int>  Help text.  [default: 5]".ljust(40)]) == 40 - 12


@pytest.mark.parametrize("command", COMMANDS)
def test_the_help_column_is_wide_enough_to_read(command: str) -> None:
    narrow = {title: help_column(lines) for title, lines in panels(HELP[command]).items()
              if title != "Commands" and help_column(lines) < NARROWEST_HELP}
    assert not narrow, f"tfm {command} --help at {WIDTH} columns: {narrow}\n{HELP[command]}"


@pytest.mark.parametrize("command", sorted(LONGEST))
def test_the_longest_help_fits_its_lines(command: str) -> None:
    lines = len(HELP[command].splitlines())
    assert lines <= LONGEST[command], f"tfm {command} --help: {lines} lines"


def test_each_command_summary_is_one_line() -> None:
    commands = panels(rendered())["Commands"]
    wrapped = [line for line in commands if line[:1] == " "]
    assert not wrapped, "\n".join(commands)
    assert len(commands) == len(COMMANDS)


def test_docs_cli_names_every_option() -> None:
    # --help says each option in a line; docs/CLI.md says the rest, of every one of them
    text = CLI_MD.read_text(encoding="utf-8")
    missing = [f"{name} {spelling}"
               for name, command in CLICK.commands.items()  # type: ignore[attr-defined]
               for p in command.params if not getattr(p, "hidden", False)
               for spelling in p.opts + p.secondary_opts
               if spelling.startswith("--")
               and not re.search(re.escape(spelling) + r"(?![\w-])", text)]
    assert not missing, missing


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_in_panels_leaves_only_config_and_help_to_other(command: str) -> None:
    # a new option of such a command names its panel (option(..., panel=...),
    # rich_help_panel=...): --help draws the options that name none last, as "Other"
    other = panels(HELP[command]).get("Other", [])
    named = {word for line in other for word in line.split() if word.startswith("--")}
    assert named <= {"--config", "--help"}, named
