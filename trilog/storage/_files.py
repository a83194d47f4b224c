"""File safety in one place: atomic replacement, durable directory entries, removal, and
syncing a whole file system (``sync_filesystem``).

``write_atomically`` is the only way trilog replaces a small metadata file (checkpoints,
markers): a crash leaves either the old content or the new, never a mix, and a failure
(a full disk) leaves the old file untouched and no temporary file behind.
``remove_dir_durably`` is how a partition directory goes: renamed to a ``*.deleted`` name
first, so that a crash halfway leaves a name the next start removes (with ``remove``).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import uuid

_syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)


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


def sync_filesystem(path: str) -> None:
    """Make everything written to the file system holding ``path`` durable: ``syncfs(2)``,
    one call instead of an fsync per file (a broker's shutdown of 50,000 logs), or ``sync``
    where there is no ``syncfs``.  ``OSError`` if it reports a write-back error."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if _syncfs is None:
            os.sync()
        elif _syncfs(fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno), path)
    finally:
        os.close(fd)


def write_atomically(path: str, data: bytes, mode: int | None = None, *,
                     sync: bool = True) -> None:
    """Replace ``path`` with ``data``: a temporary file written and fsynced, renamed over the
    old one, and the directory fsynced.  On failure the temporary file is removed and the old
    file stays as it was.  ``mode``: the file's permissions (else 0644 less the umask).
    ``sync=False`` (a file rebuilt when lost or torn): no fsync, the rename is still atomic."""
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode)
        try:
            if mode is not None:
                os.fchmod(fd, mode)  # (a temporary file left by a crash keeps its own mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
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
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def remove(path: str) -> None:
    """Remove a file, or a directory with everything in it; a missing one is no error."""
    try:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def remove_dir_durably(path: str) -> None:
    """Remove the directory ``path``: renamed to ``<name>.<random>.deleted`` and the rename
    made durable before anything inside is removed, so that a crash at any point leaves
    either the whole directory or a ``*.deleted`` name for the next start to ``remove``."""
    parent, name = os.path.split(path)
    doomed = os.path.join(parent, f"{name}.{uuid.uuid4().hex}.deleted")
    os.rename(path, doomed)
    fsync_dir(parent)
    shutil.rmtree(doomed, ignore_errors=True)
