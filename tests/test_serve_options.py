"""One option, one place, up to the server: the decoding options of a request to POST
/v1/translate are SearchOptions fields (tfm.config), derived as the command line's options are
(tfm.cli.fields), and reach the search under their own names."""

from __future__ import annotations

import dataclasses
import typing
from types import SimpleNamespace
from typing import Any, Optional

import pytest
from pydantic import ValidationError

from tfm.config import SearchOptions, option_spelling
from tfm.errors import UsageError
from tfm.serve.app import _Service
from tfm.serve.config import ServeConfig
from tfm.serve.schema import REQUEST_OPTIONS, RequestBase, TranslateRequest

FIELDS = {f.name: f for f in dataclasses.fields(SearchOptions)}
# A value of each option a request may set, other than its default.
GIVEN = {"beam": 3, "n_best": 2, "length_penalty": 0.5}


def _minimum(field: Any) -> list[Any]:
    return [m.ge for m in field.metadata if getattr(m, "ge", None) is not None]


def test_no_search_option_of_a_request_is_declared_by_hand():
    """The server's own fields are RequestBase's; not one of them is a SearchOptions field,
    nor reads as one (another name with an option's help)."""
    helps = {f.metadata["help"] for f in FIELDS.values() if f.metadata.get("help")}
    own = RequestBase.model_fields
    assert not set(own) & set(FIELDS)
    assert not [name for name, f in own.items()
                if any((f.description or "").startswith(h) for h in helps)]
    assert [n for n in TranslateRequest.model_fields if n in FIELDS] == list(REQUEST_OPTIONS)


@pytest.mark.parametrize("name", REQUEST_OPTIONS)
def test_every_search_option_of_a_request_is_its_field(name: str):
    """The type (or None: the server's default), the help and the minimum of the field."""
    option, field = TranslateRequest.model_fields[name], FIELDS[name]
    kind = typing.get_type_hints(SearchOptions)[name]
    assert option.annotation == Optional[kind]  # noqa: UP045
    assert option.default is None
    assert option.description.startswith(field.metadata["help"].replace("\\[", "["))
    assert _minimum(option) == ([field.metadata["min"]] if "min" in field.metadata else [])
    if "min" in field.metadata:
        with pytest.raises(ValidationError, match=name):
            TranslateRequest.model_validate({"text": "a", name: field.metadata["min"] - 1})
    if kind is float:
        with pytest.raises(ValidationError, match="finite"):
            TranslateRequest.model_validate({"text": "a", name: float("nan")})


def service() -> _Service:
    """A server's service over a stand-in translator whose defaults are SearchOptions'."""
    translator = SimpleNamespace(max_source_tokens=64, default_options=lambda **given: (
        SearchOptions(**{k: v for k, v in given.items() if v is not None})))
    served = _Service(ServeConfig())
    served.translator, served.defaults = translator, SearchOptions(beam=4)  # type: ignore
    return served


def test_a_requests_options_reach_the_search_under_their_names():
    assert set(GIVEN) == set(REQUEST_OPTIONS)  # a new request option needs a value here
    options = service().options(TranslateRequest(text="a", **GIVEN))
    assert {name: getattr(options, name) for name in GIVEN} == GIVEN
    unset = service().options(TranslateRequest(text="a"))
    assert unset.beam == 4 and unset.n_best == 1 and unset.length_penalty == 1.0


LIMITED = [f for f in dataclasses.fields(ServeConfig) if "min" in f.metadata]


def test_the_servers_own_limits_declare_their_minimums():
    assert {f.name for f in LIMITED} >= {"max_batch_tokens", "max_wait_ms", "max_queue",
                                         "max_sentences", "max_request_bytes", "max_beam",
                                         "beam", "max_connections"}


@pytest.mark.parametrize("field", LIMITED, ids=[f.name for f in LIMITED])
def test_a_server_setting_under_its_minimum_is_refused_naming_its_option(field):
    """Checked by tfm.config.check_fields, as every config's minimums are."""
    low = field.metadata["min"]
    spelled = option_spelling(ServeConfig, field.name)
    with pytest.raises(UsageError, match=f"^{spelled} {low - 1}: give {low} or more$"):
        ServeConfig(**{field.name: low - 1})
