"""One settings table per client: the check every client's settings test makes.

A client's frozen config dataclass is the one declaration of its settings (names, types,
defaults, validation in ``__post_init__``).  Its typed keyword dict (for ``Unpack`` in the
opener and the sync facade) cannot be derived for a type checker, so this check keeps the
two the same, and keeps the opener from declaring them a third time.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any


def assert_one_settings_table(config: type, options: type, opener: Callable[..., Any], *,
                              positional: tuple[str, ...] = (),
                              grouped: Mapping[str, type] | None = None,
                              converted: tuple[str, ...] = ()) -> None:
    """``config`` (a frozen dataclass) and ``options`` (a TypedDict) name the same settings
    with the same types, and ``opener`` takes them as ``**options`` only.

    ``positional``: the opener's parameters given apart (say ``*topics``), which are no
    settings.  ``grouped``: a config field built from the keywords of another TypedDict
    (``{"security": SecurityOptions}``).  ``converted``: fields whose config type is the
    normal form of a looser keyword type (the opener's conversion is tested elsewhere).
    """
    assert dataclasses.is_dataclass(config), config
    assert config.__dataclass_params__.frozen, f"{config.__name__} is not frozen"  # type: ignore[attr-defined]
    grouped = dict(grouped or {})
    fields = typing.get_type_hints(config)
    declared = {f.name for f in dataclasses.fields(config)}
    keywords = typing.get_type_hints(options)
    expected = set(declared) - set(grouped)
    for name, group in grouped.items():
        expected |= set(typing.get_type_hints(group))
    assert set(keywords) == expected, (
        f"{options.__name__} and {config.__name__} disagree: only in the keywords "
        f"{sorted(set(keywords) - expected)}, only in the config {sorted(expected - set(keywords))}")
    for name in declared - set(grouped) - set(converted):
        assert keywords[name] == fields[name], (
            f"{name}: {options.__name__} says {keywords[name]}, "
            f"{config.__name__} says {fields[name]}")
    parameters = inspect.signature(opener).parameters
    kinds = {name: p.kind for name, p in parameters.items()}
    var_keyword = [n for n, k in kinds.items() if k is inspect.Parameter.VAR_KEYWORD]
    assert len(var_keyword) == 1, f"{opener.__name__} takes no **options"
    others = set(kinds) - set(var_keyword) - set(positional)
    assert not others, f"{opener.__name__} declares settings again: {sorted(others)}"
