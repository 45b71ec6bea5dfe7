"""Run configs: a command's options read from a YAML file, ``--config FILE.yaml``.

The file's keys are the options' own names (``max_tokens`` or ``max-tokens``, as the field or
as the option is spelt: ``warmup`` and ``warmup_steps`` alike); what the command line gives
wins over the file; an unknown key is refused in one line naming it and the nearest known
name. A few keys exist only in a file (a list of corpora does not fit on a command line):
the command names them (``only``) and receives them as parameters.

One file can drive a whole run: each command takes the top-level keys it has and leaves
those of the other commands, and a section named after a command (``prepare:``,
``train_tokenizer:``) holds keys for it alone, over the top level (``output`` is a tokenizer
file to one command and a directory to the next).

It is click's own mechanism: the file fills the command's ``default_map`` before the other
options are read, so a value from the file is converted and checked exactly as the same value
typed on the command line.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection
from difflib import get_close_matches
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar

import typer

from tfm.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])

_ONLY = "tfm.config_only"  # click context meta: the file's config-only keys and their values
_ONLY_KEYS = "config_only__"  # a command's config-only keys, kept on its function
_CONTEXT = "config_context__"  # the parameter by which Typer hands the wrapper its context

CONFIG_HELP = ("A YAML file of options, keyed by their names (max_tokens: 1024); the command "
               "line wins over it (docs/CLI.md#run-configs).")


def with_config(only: Collection[str] = ()) -> Callable[[F], F]:
    """Gives the decorated command a ``--config FILE`` option. Keys named in ``only`` are
    allowed in the file alone and handed to the command as the keyword parameters of those
    names (None where the file has none, or no file is given)."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        params = [p for p in signature.parameters.values() if p.name not in only]
        option = typer.Option("--config", help=CONFIG_HELP, is_eager=True,
                              callback=_loader(tuple(only)), show_default=False)
        params.append(inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY,
                                        annotation=Annotated[Optional[Path], option],
                                        default=None))
        params.append(inspect.Parameter(_CONTEXT, inspect.Parameter.KEYWORD_ONLY,
                                        annotation=typer.Context))

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            values.pop("config", None)
            given = values.pop(_CONTEXT).meta.get(_ONLY, {})
            for key in only:
                values[key] = given.get(key)
            return command(**values)

        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        setattr(run, _ONLY_KEYS, tuple(only))
        return run  # type: ignore[return-value]

    return decorate


def _loader(only: tuple[str, ...]) -> Callable[..., Any]:
    def load(ctx: typer.Context, value: Optional[Path]) -> Optional[Path]:
        if value is None or ctx.resilient_parsing:
            return value
        data = read_config(value)
        mine = _names(ctx.command)
        others = _other_commands(ctx)
        section = _key(ctx.info_name or "")
        settings: dict[str, Any] = {}
        for key, item in data.items():
            name = _key(key)
            if name == section and isinstance(item, dict):  # this command's own section
                for inner in item:
                    if _key(inner) not in mine and _key(inner) not in only:
                        raise UsageError(_unknown(value, f"{key}: {inner}", set(mine) | set(only),
                                                  ctx.info_name))
                continue
            if name in others and isinstance(item, dict):  # another command's section
                continue
            if name in mine or name in only:
                settings[name] = (key, item)
            elif not any(name in names for names in others.values()):
                known = set(mine) | set(only) | set(others) | {section}
                for names in others.values():
                    known |= names
                raise UsageError(_unknown(value, str(key), known, ctx.info_name))
        own = next((v for k, v in data.items() if _key(k) == section and isinstance(v, dict)),
                   {})
        settings.update({_key(k): (k, v) for k, v in own.items()})  # the section wins
        defaults: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for name, (key, item) in settings.items():
            if name in only:
                extra[name] = item
                continue
            param, invert = mine[name]
            if invert:
                if not isinstance(item, bool):
                    raise UsageError(f"{value}: {key} takes true or false")
                item = not item
            if param.multiple and not isinstance(item, list):
                item = [item]
            if param.name in defaults:
                raise UsageError(f"{value}: {key} is given twice (under two spellings)")
            try:  # checked here, to fail as one line naming the file and the key
                _check_value(ctx, param, item)
            except Exception as e:  # click's BadParameter, or the type's own error
                message = getattr(e, "message", None) or str(e)
                raise UsageError(f"{value}: {key}: {item!r} is not valid "
                                 f"({message.splitlines()[0] if message else e})") from None
            defaults[param.name] = item
        ctx.default_map = {**(ctx.default_map or {}), **defaults}
        ctx.meta[_ONLY] = extra
        return value

    return load


def _check_value(ctx: Any, param: Any, item: Any) -> None:
    """Converts ``item`` as the command line's value of ``param`` would be (raising what that
    raises), without running the option's callback."""
    if isinstance(item, bool) and getattr(param, "is_flag", False):
        return
    runtime = getattr(param, "get_runtime_param", None)
    if runtime is not None:  # Typer's own parameters
        runtime().coerce(item, param=param, ctx=ctx)
    else:
        param.type_cast_value(ctx, item)


def _key(key: Any) -> str:
    return str(key).replace("-", "_")


def _unknown(path: Path, key: str, known: set[str], command: str | None) -> str:
    """The one line that refuses an unknown key, with the nearest known name."""
    near = get_close_matches(key.rsplit(": ", 1)[-1].replace("-", "_"), sorted(known), n=1,
                             cutoff=0.6)
    hint = f"; did you mean {near[0]}?" if near else \
        f"; `tfm {command} --help` lists the options"
    return f"{path}: unknown key {key!r}{hint}"


def _other_commands(ctx: Any) -> dict[str, set[str]]:
    """The keys of every other tfm command that takes --config, by the section name of the
    command (``train_tokenizer``): a run config shared by several commands gives each the keys
    it knows, and may have a section per command."""
    group = ctx.find_root().command
    commands = getattr(group, "commands", {})
    out = {}
    for name, command in commands.items():
        if name == ctx.info_name or not any(p.name == "config" for p in command.params):
            continue
        out[_key(name)] = set(_names(command)) | set(getattr(command.callback, _ONLY_KEYS, ()))
    return out


def read_config(path: Path) -> dict[Any, Any]:
    """The mapping of a YAML run config, or one line saying why it is not one."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"--config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--config {path}: cannot be read ({e})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UsageError(f"--config {path}{where}: not valid YAML ({problem})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: give a mapping of option names to values "
                         f"(max_tokens: 1024), not a {type(data).__name__}")
    return data


def _names(command: Any) -> dict[str, tuple[Any, bool]]:
    """Every key a config file may use for ``command``'s parameters: each parameter's name
    and each long spelling of its option (``--warmup`` -> ``warmup``), with whether the key
    means the opposite (the second spelling of a flag pair, ``--post-norm``)."""
    names: dict[str, tuple[Any, bool]] = {}
    for p in command.params:
        if p.name is None or p.name == "config" or getattr(p, "hidden", False):
            continue
        names[p.name] = (p, False)
        for spelling in p.opts:
            if spelling.startswith("--"):
                names.setdefault(spelling[2:].replace("-", "_"), (p, False))
        for spelling in getattr(p, "secondary_opts", []):
            if spelling.startswith("--"):
                names.setdefault(spelling[2:].replace("-", "_"), (p, True))
    return names


def dump_config(values: dict[str, Any]) -> str:
    """``values`` as a YAML run config: paths as text, tuples as lists, in the given order."""
    import yaml

    def plain(v: Any) -> Any:
        if isinstance(v, Path):
            return str(v)
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return yaml.safe_dump({k: plain(v) for k, v in values.items()}, sort_keys=False,
                          allow_unicode=True)
