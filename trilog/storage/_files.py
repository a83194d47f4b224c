"""File safety in one place: atomic replacement and durable directory entries.

``write_atomically`` is the only way trilog replaces a small metadata file (checkpoints,
markers): a crash leaves either the old content or the new, never a mix, and a failure
(a full disk) leaves the old file untouched and no temporary file behind.
"""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """Make the directory's entries (created, renamed, removed files) durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data``: a temporary file written and fsynced, renamed over the
    old one, and the directory fsynced.  On failure the temporary file is removed and the old
    file stays as it was."""
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(os.path.dirname(os.path.abspath(path)))
