"""Java's ``.properties`` syntax (``key=value`` or ``key: value``, ``#``/``!`` comments,
backslash line continuations): the broker's ``server.properties`` and the client properties
of the tools' ``--command-config``.  Pure: no trilog layer below it, so the command-line
tools read client properties without importing the broker.
"""

from __future__ import annotations

from trilog.errors import TrilogError


class PropertiesError(TrilogError, ValueError):
    """A properties text that cannot be read; the message names the source and line."""


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Java ``.properties`` syntax to a dict of raw strings (last one wins)."""
    result: dict[str, str] = {}
    logical: list[str] = []
    lines = text.splitlines()
    for lineno, raw in enumerate(lines, 1):
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        # A line ending in an odd number of backslashes continues on the next line.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(line[:-1])
            continue
        logical.append(line)
        entry, logical = "".join(logical), []
        key, value = _split_entry(entry)
        if not key:
            raise PropertiesError(f"{source}:{lineno}: a line with no key: {raw!r}")
        result[key] = value
    if logical:
        key, value = _split_entry("".join(logical))
        result[key] = value
    return result


def _split_entry(entry: str) -> tuple[str, str]:
    """Java's rule: the key ends at the first ``=``, ``:`` or blank; one separator follows."""
    i = 0
    while i < len(entry) and entry[i] not in "=:" and not entry[i].isspace():
        i += 1
    rest = entry[i:].lstrip()
    if rest[:1] in ("=", ":"):
        rest = rest[1:]
    return entry[:i], rest.strip()
