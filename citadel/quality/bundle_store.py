"""Where bundles are kept by id (`<home>/bundles/<id>.json`), so `citadel bundle show/diff` can read
one after the configuration that made it is gone. A bundle is written once: its id is its content."""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from pathlib import Path

from citadel.quality.bundle import Bundle
from citadel.quality.checksums import canonical_json

CURRENT = "current"
BUNDLES_DIR = "bundles"
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
log = logging.getLogger(__name__)


class BundleStore:
    def __init__(self, directory: Path | str):
        self.directory = Path(directory)

    @classmethod
    def for_home(cls, home: Path | str) -> "BundleStore":
        return cls(Path(home) / BUNDLES_DIR)

    def path(self, bundle_id: str) -> Path:
        if not SAFE_ID.fullmatch(bundle_id or ""):
            raise KeyError(bundle_id)  # an id is a file name here, never a path
        return self.directory / f"{bundle_id}.json"

    def save(self, bundle: Bundle) -> str:
        """Keep the bundle unless it is kept already; its id. Written whole or not at all (a temporary
        file renamed), so two processes starting at once never leave half a file."""
        path = self.path(bundle.id)
        if not path.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".bundle-", suffix=".json")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(canonical_json(bundle.to_dict()) + "\n")
            os.replace(temporary, path)
        return bundle.id

    def keep(self, bundle: Bundle) -> str:
        """`save`, except that a home it cannot write to costs the record, never the process starting."""
        try:
            return self.save(bundle)
        except OSError as error:
            log.warning("config bundle %s not kept in %s: %s", bundle.id, self.directory, error)
            return bundle.id

    def load(self, bundle_id: str) -> Bundle:
        """The kept bundle; KeyError when none has this id."""
        try:
            return Bundle.from_dict(json.loads(self.path(bundle_id).read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise KeyError(bundle_id) from None

    def ids(self) -> list[str]:
        """Kept ids, oldest first."""
        if not self.directory.is_dir():
            return []
        files = sorted(self.directory.glob("b-*.json"), key=lambda p: p.stat().st_mtime)
        return [p.stem for p in files]
