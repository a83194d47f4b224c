"""``trilog configs --entity-type users|clients``: client quotas, as ``kafka-configs.sh``.

An entity is one or two ``--entity-type`` options, each followed by its ``--entity-name N``
or ``--entity-default`` (``users`` then ``clients`` for a user's quotas for one client id);
``--user``/``--client`` (with a name, or ``--user-defaults``/``--client-defaults``) are the
shortcuts.  ``--describe`` without a name lists every entity of the types given.  The work
is ``Admin.describe_client_quotas`` and ``Admin.alter_client_quotas``.
"""

from __future__ import annotations

import argparse
from typing import Any

from trilog.cli._common import UsageError
from trilog.client import Admin, QuotaFilter

_TYPES = {"users": "user", "clients": "client-id"}
_TITLES = {"user": "user-principal", "client-id": "client-id"}
#: ``(entity type, name)``: a name, None for ``--entity-default``, "" for no name given
Part = tuple[str, "str | None"]


class EntityPart(argparse.Action):
    """Keeps ``--entity-type``, ``--entity-name`` and ``--entity-default`` in the order given
    (in ``entity_parts``), so that each name goes with the type before it."""

    def __call__(self, parser: Any, namespace: Any, values: Any,
                 option_string: str | None = None) -> None:
        parts = list(getattr(namespace, "entity_parts", None) or [])
        parts.append((self.const, values))
        namespace.entity_parts = parts
        if self.const == "type":
            namespace.entity_type = values
        elif self.const == "name":
            namespace.entity_name = values


def quota_entity(args: Any) -> list[Part] | None:
    """The quota entity the options name (None: they name a topic or a broker)."""
    raw = list(getattr(args, "entity_parts", None) or [])
    for option, kind in (("user", "users"), ("client", "clients")):
        value = getattr(args, option)
        if value is not None:
            raw += [("type", kind), ("name", value)]
        if getattr(args, f"{option}_defaults"):
            raw += [("type", kind), ("default", None)]
    kinds = [v for what, v in raw if what == "type"]
    if not any(k in _TYPES for k in kinds):
        if any(what == "default" for what, _v in raw):
            raise UsageError("--entity-default goes with --entity-type users or clients")
        return None
    if any(k not in _TYPES for k in kinds):
        raise UsageError("users and clients do not mix with topics or brokers")
    parts: list[Part] = []
    for what, value in raw:
        if what == "type":
            parts.append((_TYPES[value], ""))
        elif not parts or parts[-1][1] != "":
            raise UsageError(f"--entity-{what} needs an --entity-type before it")
        elif what == "name" and value == "":
            raise UsageError("--entity-name must not be empty (--entity-default names the "
                             "default)")
        else:
            parts[-1] = (parts[-1][0], value if what == "name" else None)
    if len({kind for kind, _n in parts}) != len(parts):
        raise UsageError("give each of users and clients at most once")
    parts.sort(key=lambda p: p[0] != "user")
    return parts


def parse_changes(changes: dict[str, str | None]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, text in changes.items():
        if text is None:
            out[key] = None
            continue
        try:
            out[key] = float(text)
        except ValueError:
            raise UsageError(f"{key}={text!r}: a quota is a number") from None
    return out


async def alter(admin: Admin, parts: list[Part], changes: dict[str, str | None]) -> int:
    if any(name == "" for _k, name in parts):
        raise UsageError("--alter needs --entity-name or --entity-default for each "
                         "--entity-type")
    entity = tuple(parts)
    await admin.alter_client_quotas(entity, parse_changes(changes))
    print(f"Completed updating config for {_text(entity)}.")
    return 0


async def describe(admin: Admin, parts: list[Part]) -> int:
    filters = [QuotaFilter.any(kind) if name == "" else
               QuotaFilter.default(kind) if name is None else QuotaFilter.exact(kind, name)
               for kind, name in parts]
    found = await admin.describe_client_quotas(filters, strict=True)
    for entity, quotas in sorted(found.items(), key=lambda i: [(k, n or "") for k, n in i[0]]):
        values = ", ".join(f"{k}={v}" for k, v in sorted(quotas.items()))
        print(f"Quota configs for {_text(entity)} are {values}")
    return 0


def _text(entity: tuple[Part, ...]) -> str:
    """Kafka's words: ``user-principal 'alice', default client-id``."""
    return ", ".join(f"the default {_TITLES[k]}" if n is None else f"{_TITLES[k]} '{n}'"
                     for k, n in entity)
