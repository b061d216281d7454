"""The one cross-process file lock: an exclusive `flock` on a file, held for a `with` block.

Every critical section that several processes share (a tenant's build-and-publish, a read-modify-write
of a secrets file, a fault drill's kill ledger, an ingest job's staging folder) takes it here, so the
open mode, the release and the non-blocking variant are written once.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


class LockHeld(BlockingIOError):
    """A non-blocking attempt found the lock held by another open file (a live process owns it)."""


@contextmanager
def file_lock(path: Path, blocking: bool = True) -> Iterator[IO[str]]:
    """Hold an exclusive lock on `path` (created if missing, never truncated) for the block.

    Yields the open file (read and append), so a ledger can be read and extended under its own lock.
    `blocking=False` raises LockHeld at once instead of waiting. The lock goes with the block, or with
    the process if it dies: flock locks belong to the open file, never outlive it.
    """
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            raise LockHeld(f"{path} is locked by another process") from error
        try:
            yield handle
        finally:
            handle.flush()  # what the holder wrote is in the file before anyone else may read it
            fcntl.flock(handle, fcntl.LOCK_UN)
