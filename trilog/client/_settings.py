"""An opener's keywords into its client's config: one settings table per client.

A client declares its settings once, as a frozen dataclass (``ProducerConfig``,
``AdminConfig``, ...) whose ``__post_init__`` checks them.  Its opener takes them as
``**options`` (typed for type checkers by a TypedDict that a test keeps equal to the
dataclass) and calls ``config_from_options``: the security keywords (``SecurityOptions``)
become the config's one ``security`` field, an unknown keyword is a ``TypeError`` naming the
opener, a bad value the dataclass's ``ValueError``; all before anything connects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from trilog.net import SecurityOptions, client_security

_C = TypeVar("_C")

#: the keywords that describe the connections' security, gathered into one ``ClientSecurity``
SECURITY_KEYWORDS = frozenset(SecurityOptions.__annotations__)


def config_from_options(config: Callable[..., _C], options: Mapping[str, Any],
                        opener: str) -> _C:
    """``config(**settings, security=...)`` from an opener's ``**options`` (``config`` is a
    dataclass with a ``security`` field)."""
    settings = dict(options)
    security = {name: settings.pop(name) for name in SECURITY_KEYWORDS & settings.keys()}
    known = {f.name for f in dataclasses.fields(config)} - {"security"}  # type: ignore[arg-type]
    unknown = sorted(settings.keys() - known)
    if unknown:
        raise TypeError(f"{opener}() got an unexpected keyword argument {unknown[0]!r}")
    return config(**settings, security=client_security(cast(SecurityOptions, security)))
