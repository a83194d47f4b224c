"""The ``trilog`` command."""

from trilog.cli._main import main

__all__ = ["main"]
