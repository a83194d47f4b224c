"""A standalone broker's small state files: one JSON document each, one error rule.

Topic configs (``topic-configs.json``), ACLs (``acls.json``) and SCRAM credentials
(``users.json``, or ``sasl.credentials.file``) are each a ``JsonFileStore``: a document
``{"version": 1, "<section>": {...}}`` in one file.

- **Reading** gives the section (empty when the file does not exist yet).  A file that cannot
  be read, is not JSON, or is not of that shape raises ``StoreError`` naming the file, and
  the owners read their stores when the broker starts: a damaged store stops the broker
  with that error, never an empty store (an empty one would silently drop every topic's
  retention override, every ACL, every user).
- **Writing** replaces the file atomically (a temporary file, fsynced, renamed over it, the
  directory fsynced: ``storage.write_atomically``); a crash leaves the old document or
  the new one.  The files are created readable by their owner only (0600): they hold
  credentials and access rules.

Blocking (callers use worker threads); not thread-safe: each store's owner writes one change
at a time.
"""

from __future__ import annotations

import json
import os
from typing import Any

from trilog.errors import TrilogError
from trilog.storage import write_atomically

VERSION = 1
FILE_MODE = 0o600


class StoreError(TrilogError):
    """A store's file cannot be read, or does not hold what it should (the message names
    the file)."""


class JsonFileStore:
    """The section ``section`` of the JSON document in ``path`` (see the module docstring):
    a JSON object, or with ``kind=list`` an array."""

    def __init__(self, path: str, section: str, kind: type = dict) -> None:
        self.path = path
        self.section = section
        self.kind = kind

    def read(self) -> Any:
        """The section (empty when the file does not exist); ``StoreError``."""
        try:
            with open(self.path, encoding="utf-8") as f:
                document = json.load(f)
        except FileNotFoundError:
            return self.kind()
        except (OSError, UnicodeDecodeError) as exc:
            raise self.error(f"cannot be read ({exc})") from None
        except json.JSONDecodeError as exc:
            raise self.error(f"is not valid JSON ({exc.msg} at line {exc.lineno} "
                             f"column {exc.colno})") from None
        if not isinstance(document, dict):
            raise self.error(f"holds a JSON {type(document).__name__}, not an object")
        if document.get("version", VERSION) != VERSION:
            raise self.error(f"is of version {document.get('version')!r}; this broker "
                             f"reads version {VERSION}")
        section = document.get(self.section, self.kind())
        if not isinstance(section, self.kind):
            what = "an object" if self.kind is dict else "an array"
            raise self.error(f"has a {self.section!r} that is not {what}")
        return section

    def write(self, section: Any) -> None:
        """Replace the document with ``section`` (atomically, mode 0600)."""
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        data = json.dumps({"version": VERSION, self.section: section}, indent=1,
                          sort_keys=True)
        write_atomically(self.path, data.encode() + b"\n", mode=FILE_MODE)

    def error(self, what: str) -> StoreError:
        """The error for a file that ``what`` (say, a malformed entry), naming the file."""
        return StoreError(f"{self.path} {what}; fix or remove the file (the broker will not "
                          "start with it as it is)")
