"""Command-line options derived from the configuration dataclasses of tfm.config.

An option is written once, as a dataclass field: its name, type, default, help and checks
(``tfm.config.option``). A command takes a dataclass's options with ``@derive``: each parameter
named there stands for all the options of its dataclass in the command's signature (which is
what Typer reads), and the command receives them back as one value:

    @app.command()
    @derive(clean=Fields(CleanConfig))
    def prepare(..., clean: CleanConfig) -> None:

A new field is a new option of every command that derives from its dataclass.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Optional, TypeVar, Union

import typer

from tfm.config import option_spelling
from tfm.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])


def default_note(value: object) -> str:
    """The help text's default note, for options whose default is decided later (from a
    config dataclass or the model directory): typer cannot show those itself."""
    return f"  \\[default: {value}]"


@dataclass(frozen=True)
class Fields:
    """The options of dataclass ``cls``: one a field, but for the fields declared with
    ``option=None`` and those in ``exclude``.

    ``given_only``: every option defaults to None, and the command receives a dict of the
    options given (a resumed run must know what was asked anew; a model's own defaults fill
    the rest); else it receives an instance of ``cls``.

    How --help shows them, for a command to choose: ``panels``, the panel of a field (by
    name) whose dataclass does not say it (``option(..., panel=...)``), ``panel`` that of the
    rest; ``metavars``, the name --help gives a field's value where its type's would crowd the
    panel's help column (tfm.cli.help_layout)."""

    cls: type
    given_only: bool = False
    exclude: Collection[str] = ()
    panels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    panel: str | None = None
    metavars: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def fields(self) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(self.cls)
                if option_spelling(self.cls, f.name) is not None and f.name not in self.exclude]

    def parameters(self) -> list[inspect.Parameter]:
        """The Typer parameters of these fields (and a hidden one for each old spelling)."""
        hints = typing.get_type_hints(self.cls)
        params = []
        for f in self.fields():
            value_type = _unoptional(hints[f.name])
            # A field is an option unless it says otherwise (option=None); one declared
            # without tfm.config.option has no help, which tests/test_options.py reports.
            help_text = f.metadata.get("help", "")
            if "was" in f.metadata:
                help_text += f" (Spelled {f.metadata['was']} before; that spelling is refused.)"
            default = _default(f)
            spelled = option_spelling(self.cls, f.name)  # "--on/--off" for a flag
            if value_type is bool:
                on, _, off = spelled.partition("/")
                off = off or "--no-" + on.removeprefix("--")
                decls = [f"{on}/{off}"]
                shown = on.removeprefix("--") if default else off.removeprefix("--")
            else:
                decls = [spelled]
                shown = default
            decls += [f.metadata["short"]] if "short" in f.metadata else []
            shown = f.metadata.get("shown_default", shown)
            more = ({"envvar": f.metadata["envvar"], "show_envvar": True}
                    if "envvar" in f.metadata else {})
            more["rich_help_panel"] = self.panels.get(f.name, f.metadata.get("panel", self.panel))
            if f.name in self.metavars:
                more["metavar"] = self.metavars[f.name]
            if self.given_only or default is None:
                info = typer.Option(*decls, help=help_text + (
                    default_note(shown) if shown is not None else ""), show_default=False,
                    **more)
                annotation: Any = Annotated[Optional[value_type], info]  # noqa: UP045
                params.append(_keyword(f.name, annotation, None))
            else:
                info = typer.Option(*decls, help=help_text, **more)
                params.append(_keyword(f.name, Annotated[value_type, info], default))
            if "was" in f.metadata:
                old = typer.Option(f.metadata["was"], hidden=True, show_default=False)
                params.append(_keyword(_old(f), Annotated[Optional[str], old], None))
        return params

    def collect(self, values: dict[str, Any]) -> Any:
        """Takes this group's values out of ``values`` (a command's keyword arguments): a dict
        of those given (``given_only``), else an instance of ``cls``."""
        given = {}
        for f in self.fields():
            if "was" in f.metadata and values.pop(_old(f), None) is not None:
                raise UsageError(f"{f.metadata['was']} is now spelled "
                                 f"{option_spelling(self.cls, f.name)}: "
                                 f"{f.metadata.get('help', '')}")
            value = values.pop(f.name)
            if value is not None:
                given[f.name] = value
        return given if self.given_only else self.cls(**given)


def derive(**groups: Fields) -> Callable[[F], F]:
    """Replaces each parameter of the decorated command named in ``groups`` with its fields'
    options, in its place; the command is called with that parameter set to what
    ``Fields.collect`` makes of them."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        params: list[inspect.Parameter] = []
        for p in signature.parameters.values():
            if p.name in groups:
                params += groups[p.name].parameters()
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))
        names = [p.name for p in params]
        assert len(names) == len(set(names)), f"an option is declared twice in {names}"

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            for name, group in groups.items():
                values[name] = group.collect(values)
            return command(**values)

        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        return typing.cast(F, run)

    return decorate


def _old(f: dataclasses.Field) -> str:
    return f"{f.name}__was"


def _default(f: dataclasses.Field) -> Any:
    """The field's default; None for a list (a repeatable option, empty unless given)."""
    return None if f.default is dataclasses.MISSING else f.default


def _unoptional(hint: Any) -> Any:
    """``X | None`` -> X."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _keyword(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=default)
