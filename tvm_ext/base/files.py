"""Files the package writes: atomically (a reader sees the old file or the new, never half of
one, and a crash leaves no partial file behind) and, for what it caches, in one place."""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Iterator

import platformdirs

CACHE_ENV = "TVM_EXT_CACHE_DIR"


def cache_dir() -> pathlib.Path:
    """Where the package caches what it derives (machine probes, dataset columns):
    ``$TVM_EXT_CACHE_DIR`` when set (read at each call; the test suite points it at a temporary
    folder), else the user cache directory. Never a tuning log's folder."""
    return pathlib.Path(os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("tvm-ext"))


@contextlib.contextmanager
def atomic_path(path, suffix: str = "") -> Iterator[pathlib.Path]:
    """A temporary path beside ``path`` to write; on a clean exit it replaces ``path`` in one
    rename, on an error it is removed and ``path`` is left as it was. Creates the parent."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    tmp = pathlib.Path(name)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, flushed to disk before the rename."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


__all__ = ["CACHE_ENV", "atomic_path", "atomic_write", "cache_dir"]
