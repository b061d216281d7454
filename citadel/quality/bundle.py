"""Config bundles (DESIGN.md §11): the effective configuration that shapes an answer, hashed to an id.

Prompts (versions and texts), the models by checksum (embedder, reader, reranker, generator, gate
model), retrieval and gate settings, the agent's stopping rules and the tool registry form one
canonical dict; its sha256 names it (`b-` + 12 hex). Every answer, run and trace records the id, so a
changed answer can be traced to the change of configuration behind it (`citadel bundle diff A B`).
What goes in and what is left out: citadel/quality/bundle_sections.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from citadel.quality.bundle_sections import sections
from citadel.quality.checksums import value_sha256

ID_PREFIX = "b-"
ID_HEX_CHARS = 12


@dataclass(frozen=True)
class Bundle:
    """The canonical dict of named sections; `id` is derived from it, never stored beside it."""

    sections: dict[str, Any]

    @property
    def id(self) -> str:
        return bundle_id(self)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "sections": self.sections}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Bundle":
        return cls(data["sections"])


@dataclass(frozen=True)
class Change:
    key: str  # dotted path, e.g. "answer.min_coverage" or "models.reader.weights_sha256"
    old: Any
    new: Any


def effective_bundle(config) -> Bundle:
    """The bundle of a CitadelConfig (files hashed once per process and version: see checksums.py)."""
    return Bundle(sections(config))


def bundle_id(bundle: Bundle) -> str:
    return ID_PREFIX + value_sha256(bundle.sections)[:ID_HEX_CHARS]


def diff(a: Bundle, b: Bundle) -> list[Change]:
    """Every leaf that differs between two bundles, by dotted key (a key only one has: None on the other)."""
    old, new = _leaves(a.sections), _leaves(b.sections)
    return [Change(key, old.get(key), new.get(key)) for key in sorted(old.keys() | new.keys())
            if old.get(key) != new.get(key)]


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict flattened to dotted keys; lists and scalars are leaves."""
    if not isinstance(value, dict) or not value:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, inner in value.items():
        flat.update(_leaves(inner, f"{prefix}.{key}" if prefix else str(key)))
    return flat
