"""What every identity module shares: the two errors, bounded name checks, 0600 secret files written
atomically, and a file cache that reloads when the file changes (so a revocation or a key rotation
reaches a running gateway without a restart)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
import unicodedata
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from citadel.locks import file_lock

MAX_NAME_CHARS = 256  # tenant, user, group, service, kid and jti values
SECRET_DIR_MODE = 0o700

T = TypeVar("T")



def valid_name(value: Any) -> bool:
    """Identifiers end up in logs, cache keys and SQL parameters: bounded, non-empty, no control
    chars, and encodable as UTF-8 (JSON can spell a lone surrogate, which nothing downstream can store)."""
    return (isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS
            and not any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value))


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def ensure_secret_dir(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True, mode=SECRET_DIR_MODE)


def write_secret_tmp(directory: Path, data: str) -> Path:
    """A fully written, fsynced 0600 temp file next to the target (so a rename/link is atomic)."""
    fd, name = tempfile.mkstemp(dir=directory, prefix=".tmp-")  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        os.unlink(name)
        raise
    return Path(name)


def replace_secret_file(path: Path, data: str) -> None:
    ensure_secret_dir(path.parent)
    os.replace(write_secret_tmp(path.parent, data), path)


@contextlib.contextmanager
def locked(path: Path):
    """Serialise read-modify-write of `path` so two concurrent CLI edits both land."""
    ensure_secret_dir(path.parent)
    with file_lock(path.with_name(path.name + ".lock")):
        yield


class WatchedFile(Generic[T]):
    """`parse(path)` of a file, re-read only when its stat signature changes (one stat per call).

    A parse error propagates (fail closed): a corrupt credentials or keys file refuses every caller
    rather than silently falling back to an older copy."""

    def __init__(self, path: Path, parse: Callable[[Path], T]):
        self.path, self._parse = path, parse
        self._lock = threading.Lock()
        self._signature: tuple | None = None
        self._value: T | None = None

    def get(self) -> T:
        try:
            info = self.path.stat()
            signature: tuple | None = (info.st_ino, info.st_mtime_ns, info.st_size)
        except FileNotFoundError:
            signature = None
        with self._lock:
            if self._value is None or signature != self._signature:
                self._value, self._signature = self._parse(self.path), signature
            return self._value
