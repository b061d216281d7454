"""Checksums of the files that shape an answer (model weights, artefacts, registries).

A bundle names files by their content, never by their path alone: the same path can hold new
weights after an upgrade, and the same weights can sit at another path on another machine.
Hashing a 90 MB model takes a fraction of a second, so each file is hashed once per process and
content version (its size and modification time), not once per bundle.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

BLOCK = 1 << 20
MISSING = "missing"


def file_sha256(path: Path | str) -> str:
    """The file's sha256 (hex), or MISSING when there is no such file: a bundle still forms, and
    says so, rather than failing an answer over a checksum."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        return MISSING
    if not path.is_file():
        return MISSING
    return _hashed(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _hashed(path: str, size: int, mtime_ns: int) -> str:
    # size and mtime_ns are part of the key: a file rewritten in place is hashed again.
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_sha256(directory: Path | str) -> str:
    """One sha256 over every file under `directory`: each file's path relative to it and its sha256."""
    directory = Path(directory)
    if not directory.is_dir():
        return MISSING
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(directory).as_posix()}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    """The one serialisation hashes are taken over: sorted keys, no spaces, UTF-8 as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def value_sha256(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
