"""One option, one place: the options that commands derive from the configuration dataclasses
(tfm.cli.fields) agree with their fields in name, default and help, and reach the library under
the field's name."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
import typer
from typer.testing import CliRunner

import tfm.cli  # noqa: F401 (registers the commands)
from tfm.cli.app import app
from tfm.cli.distill import NOT_A_STUDENT_S
from tfm.cli.fields import Fields
from tfm.config import (
    BacktranslateConfig,
    CleanConfig,
    DistillConfig,
    EngineOptions,
    ModelConfig,
    ScoreOptions,
    SearchOptions,
    TrainConfig,
)
from tfm.data.language_marks import LanguageMarking, ModelLanguages
from tfm.errors import UsageError
from tfm.serve.config import ServeConfig

# The commands whose options come from dataclasses, and how (tfm.cli.fields.derive): a command
# that starts deriving its options belongs here.
DERIVED = {
    "train": [Fields(ModelConfig, given_only=True), Fields(TrainConfig, given_only=True)],
    "prepare": [Fields(CleanConfig)],
    "translate": [Fields(SearchOptions, given_only=True), Fields(EngineOptions)],
    "eval": [Fields(ScoreOptions), Fields(SearchOptions, given_only=True, exclude=("n_best",)),
             Fields(EngineOptions)],
    "serve": [Fields(EngineOptions, exclude=("ensemble", "reverse_model", "reverse_weight")),
              Fields(ServeConfig)],
    "distill": [Fields(DistillConfig),
                Fields(ModelConfig, given_only=True, exclude=("drop_residual_layer",)),
                Fields(TrainConfig, given_only=True, exclude=NOT_A_STUDENT_S)],
    "backtranslate": [Fields(SearchOptions, given_only=True, exclude=("n_best", "mbr")),
                      Fields(EngineOptions, exclude=("model", "ensemble", "reverse_model",
                                                     "reverse_weight")),
                      Fields(BacktranslateConfig)],
}
CONFIGS = {BacktranslateConfig, CleanConfig, DistillConfig, EngineOptions, ModelConfig,
           ScoreOptions, SearchOptions, TrainConfig, ServeConfig}
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


def derived() -> list[tuple[str, Fields, dataclasses.Field, click.Parameter]]:
    """(command, group, field, its click parameter) for every derived option."""
    found = []
    for name, groups in DERIVED.items():
        params = {p.name: p for p in COMMANDS[name].params}
        for group in groups:
            for f in group.fields():
                found.append((name, group, f, params.get(f.name)))
    return found


OPTIONS = derived()


def test_every_option_a_config_declares_comes_from_a_group_listed() -> None:
    """An option with the name and help of a config dataclass's field is derived from it
    (and listed in DERIVED), never written again by hand."""
    declared = [(f.name, f.metadata["help"]) for cls in CONFIGS for f in Fields(cls).fields()
                if f.metadata.get("help")]
    listed = {(command, f.name) for command, _, f, _ in OPTIONS}
    unlisted = [(name, p.name) for name, command in COMMANDS.items() for p in command.params
                if (name, p.name) not in listed
                and any(p.name == field and (p.help or "").startswith(help_text)
                        for field, help_text in declared)]
    assert not unlisted


def _default_shown(f: dataclasses.Field) -> str:
    if "shown_default" in f.metadata:
        return str(f.metadata["shown_default"])
    if isinstance(f.default, bool):
        on, off = f.metadata.get("flag", (f"--{f.name.replace('_', '-')}",
                                          f"--no-{f.name.replace('_', '-')}"))
        return (on if f.default else off).removeprefix("--")
    return str(f.default)


@pytest.mark.parametrize(("command", "group", "field", "param"), OPTIONS,
                         ids=[f"{c}:{f.name}" for c, _, f, _ in OPTIONS])
def test_every_option_agrees_with_its_field(command: str, group: Fields,
                                            field: dataclasses.Field,
                                            param: click.Parameter | None) -> None:
    assert param is not None, f"tfm {command} has no option for {group.cls.__name__}.{field.name}"
    spellings = param.opts + param.secondary_opts
    if "flag" in field.metadata:
        assert list(field.metadata["flag"]) == spellings
    else:
        assert field.metadata.get("option", "--" + field.name.replace("_", "-")) in spellings
    assert field.metadata.get("help"), f"{group.cls.__name__}.{field.name} has no help"
    assert param.help.startswith(field.metadata["help"])
    repeatable = field.default is dataclasses.MISSING  # a list: empty unless given
    if group.given_only or field.default is None or repeatable:
        # None until given; the help says the field's default
        assert param.default is None
        if (field.default is not None and not repeatable) or "shown_default" in field.metadata:
            assert param.help.endswith(f"[default: {_default_shown(field)}]"), param.help
    else:
        assert param.default == field.default
        assert param.show_default is not False


def test_old_spellings_are_refused_naming_the_new_one() -> None:
    old = [(c, f) for c, _, f, _ in OPTIONS if "was" in f.metadata]
    assert ("prepare", "max_length") in {(c, f.name) for c, f in old}
    for command, f in old:
        result = CliRunner().invoke(app, [command, f.metadata["was"], "5"])
        assert isinstance(result.exception, UsageError), result.output
        new = f.metadata.get("option", "--" + f.name.replace("_", "-"))
        assert str(result.exception).startswith(f"{f.metadata['was']} is now spelled {new}")


def test_a_check_of_a_field_is_one_line_that_names_the_option() -> None:
    with pytest.raises(UsageError, match="^--max-length 0: give 1 or more$"):
        CleanConfig(max_length=0)
    with pytest.raises(UsageError, match="^--warmup -1: give 0 or more$"):
        TrainConfig(warmup_steps=-1)
    with pytest.raises(UsageError, match="^--beam 0: give 1 or more$"):
        SearchOptions(beam=0)


# --- what a command hands the library: the fields, under their own names ---------------------


def test_tfm_train_hands_the_library_the_fields_given(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake_train(*args: Any, **kwargs: Any) -> SimpleNamespace:
        calls.append(args)
        return SimpleNamespace(is_main=False, stopped="done")

    monkeypatch.setattr("tfm.training.loop.train", fake_train)
    result = CliRunner().invoke(app, [
        "train", "--data", str(tmp_path), "--output", str(tmp_path / "m"), "--preset", "tiny",
        "--max-tokens", "1234", "--warmup", "7", "--max-steps", "3", "--pre-norm",
        "--dropout", "0.2"])
    assert result.exit_code == 0, result.output
    (args,) = calls
    model_config, config = args[2], args[3]
    assert (config.max_tokens, config.warmup_steps, config.max_steps) == (1234, 7, 3)
    assert (model_config.norm_first, model_config.dropout, model_config.d_model) == (
        True, 0.2, 128)


def test_tfm_prepare_hands_the_library_a_clean_config(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    calls: list[CleanConfig] = []

    def fake_prepare(train: Any, tokenizer: Any, output: Any, valid: Any,
                     clean: CleanConfig, *rest: Any) -> SimpleNamespace:
        calls.append(clean)
        raise SystemExit(0)

    monkeypatch.setattr("tfm.data.prepare.prepare", fake_prepare)
    corpus = Path(__file__).resolve().parent.parent / "data" / "demo" / "train"
    CliRunner().invoke(app, ["prepare", "--train", str(corpus), "-s", "en", "-t", "de",
                             "--max-length", "80", "--dedup", "-o", str(tmp_path / "d")])
    assert calls == [CleanConfig(max_length=80, dedup=True)]


def test_tfm_translate_hands_the_search_the_options_given(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """``beam`` and ``batch_tokens`` from the command line to the SearchOptions the search
    gets, the model's defaults filling what was not given."""
    from tfm.config import GenerationDefaults
    from tfm.decoding.translator import Source, Translation, Translator

    seen: list[SearchOptions] = []

    class Fake:
        info = SimpleNamespace(generation=GenerationDefaults(max_len_b=7), src_lang=None)
        vocabs = SimpleNamespace(src=SimpleNamespace(get_vocab=dict))  # no language tags
        supports_attention, engine, reranker = True, "fake", None
        languages = ModelLanguages(LanguageMarking("none"), (), {}.get, {}.get)  # bilingual
        default_options = Translator.default_options

        def prepare(self, sentences: list[str], specs: Any, options: SearchOptions,
                    *direction: Any) -> list:
            seen.append(options)
            return [Source(s, []) for s in sentences]

        def translate_prepared(self, sources: list, options: SearchOptions) -> list:
            return [Translation(s.sentence, [("", 0.0)]) for s in sources]

    monkeypatch.setattr("tfm.decoding.engines.load_translator", lambda *a, **k: Fake())
    result = CliRunner().invoke(app, ["translate", "-m", "m", "--beam", "3",
                                      "--batch-tokens", "77", "Hello."])
    assert result.exit_code == 0, result.output
    assert seen == [SearchOptions(beam=3, batch_tokens=77, max_len_b=7)]
