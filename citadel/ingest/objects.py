"""The object store raw uploads are kept in (citadel/ingest/uploads.py), behind one narrow protocol.

Keys are strings of `/`-separated segments. A key is written once: putting the same bytes again is a
no-op, other bytes under a key that exists are refused (`Conflict`, code `object_exists`), so a
stored raw file is never overwritten in place. Two backends pass one conformance suite
(tests/conformance/suites/object_store.py):
- `LocalObjectStore`: a directory (by default `<home>/objects`), the embedded default. Each put
  writes a temporary file and hard-links it into place, which fails if the key exists: two writers
  of one key cannot both win.
- `S3ObjectStore`: an S3-compatible bucket through boto3 (the optional `s3` extra), with the
  conditional put (`If-None-Match: *`) S3 and its compatible servers give for create-if-absent.
Nothing outside the store ever sees where an object lives (no path or bucket URL leaves it).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from citadel.errors import Conflict, InvalidRequest, NotFound, Unavailable

if TYPE_CHECKING:
    from citadel.config import CitadelConfig

# Longest key a store takes (S3's limit), and most keys one listing returns.
MAX_KEY_CHARS = 1024
MAX_LISTED_KEYS = 10_000
log = logging.getLogger(__name__)
_KEY_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:%=-/")


@runtime_checkable
class ObjectStore(Protocol):
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Store `data` under `key` unless it is there: True when written now, False when the same
        bytes were there already; other bytes under the key raise Conflict (`object_exists`)."""
    def get(self, key: str) -> bytes:
        """The object's bytes; NotFound when there is none."""
    def delete(self, key: str) -> bool:
        """Delete the object; False when there was none."""
    def list_prefix(self, prefix: str) -> list[str]:
        """Keys that start with `prefix`, sorted (at most MAX_LISTED_KEYS)."""


def check_key(key: str, prefix: bool = False) -> str:
    """A key (or, with `prefix`, a key's beginning, which may be empty or end in `/`) made of plain
    segments: no empty, `.` or `..` segment, nothing a file system or URL would read otherwise."""
    if not isinstance(key, str) or len(key) > MAX_KEY_CHARS or not set(key) <= _KEY_CHARACTERS:
        raise InvalidRequest("an object key is up to 1024 characters of [A-Za-z0-9._:%=-/]")
    segments = key.split("/")
    if prefix:
        segments = segments[:-1]  # the part after the last slash may be empty or partial
    elif not key:
        raise InvalidRequest("an object key is not empty")
    if any(segment in ("", ".", "..") for segment in segments):
        raise InvalidRequest("an object key's segments are not empty, '.' or '..'")
    return key


def _exists_conflict(key: str) -> Conflict:
    return Conflict(f"object {key!r} exists with other content; keys are never overwritten", code="object_exists")


class LocalObjectStore:
    """Objects as files under `root` (the key is the relative path)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
        temporary.write_bytes(data)
        try:
            os.link(temporary, path)  # atomic create-if-absent: never replaces an existing file
        except FileExistsError:
            if path.read_bytes() != data:
                raise _exists_conflict(key) from None
            return False
        finally:
            temporary.unlink(missing_ok=True)
        return True

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise NotFound(f"no object {key!r}") from None

    def delete(self, key: str) -> bool:
        path = self._path(key)
        try:
            path.unlink()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return False
        self._remove_empty_parents(path.parent)
        return True

    def _remove_empty_parents(self, folder: Path) -> None:
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:  # not empty (another object), or already gone
                return
            folder = folder.parent

    def list_prefix(self, prefix: str) -> list[str]:
        check_key(prefix, prefix=True)
        folder = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        if not folder.is_dir():
            return []
        keys = []
        for path in folder.rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)[:MAX_LISTED_KEYS]


class S3ObjectStore:
    """Objects in an S3-compatible bucket, under `prefix`. `client`: a boto3 S3 client (made from
    the endpoint, region and the standard AWS credential chain when not given)."""

    def __init__(self, bucket: str, prefix: str = "", client: Any = None, endpoint_url: str | None = None,
                 region: str | None = None):
        if client is None:
            import boto3  # the optional `s3` extra; only this backend needs it

            client = boto3.client("s3", endpoint_url=endpoint_url, region_name=region)
        self._client = client
        self._bucket = bucket
        self._prefix = check_key(prefix, prefix=True) if prefix else ""

    def _name(self, key: str) -> str:
        return self._prefix + check_key(key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        name = self._name(key)
        try:
            self._client.put_object(Bucket=self._bucket, Key=name, Body=data, IfNoneMatch="*",
                                    ChecksumSHA256=_b64_sha256(data))
        except Exception as error:
            if _s3_code(error) not in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise _unavailable(error) from None
            if self.get(key) != data:
                raise _exists_conflict(key) from None
            return False
        return True

    def get(self, key: str) -> bytes:
        name = self._name(key)
        try:
            return self._client.get_object(Bucket=self._bucket, Key=name)["Body"].read()
        except Exception as error:
            if _s3_code(error) in ("NoSuchKey", "404", "NotFound"):
                raise NotFound(f"no object {key!r}") from None
            raise _unavailable(error) from None

    def delete(self, key: str) -> bool:
        name = self._name(key)
        try:
            self._client.head_object(Bucket=self._bucket, Key=name)
        except Exception as error:
            if _s3_code(error) in ("NoSuchKey", "404", "NotFound"):
                return False
            raise _unavailable(error) from None
        try:
            self._client.delete_object(Bucket=self._bucket, Key=name)
        except Exception as error:
            raise _unavailable(error) from None
        return True

    def list_prefix(self, prefix: str) -> list[str]:
        check_key(prefix, prefix=True)
        keys: list[str] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket,
                                                                           Prefix=self._prefix + prefix)
            for page in pages:
                keys += [item["Key"][len(self._prefix):] for item in page.get("Contents", ())]
                if len(keys) >= MAX_LISTED_KEYS:
                    break
        except Exception as error:
            raise _unavailable(error) from None
        return sorted(keys)[:MAX_LISTED_KEYS]


def _b64_sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def _s3_code(error: Exception) -> str:
    """The S3 error code of a botocore ClientError ('' for anything else)."""
    response = getattr(error, "response", None) or {}
    return str((response.get("Error") or {}).get("Code", ""))


def _unavailable(error: Exception) -> Unavailable:
    # The bucket, endpoint and driver text stay out of what a client sees.
    log.warning("object store call failed: %s: %s", type(error).__name__, error)
    return Unavailable("the object store is unavailable; try again shortly", code="object_store_unavailable")


def make_object_store(config: CitadelConfig) -> ObjectStore:
    """The store `objects` config names: a directory under the home, or an S3-compatible bucket."""
    settings = config.objects
    if settings.backend == "s3":
        return S3ObjectStore(str(settings.bucket), settings.prefix, endpoint_url=settings.endpoint_url,
                             region=settings.region)
    return LocalObjectStore(settings.root or config.home / "objects")
