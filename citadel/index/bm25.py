"""BM25 keyword search over tantivy 0.27.

Schema: `text` (tokenizer "en_stem", not stored: the chunk table holds the text) and `row`, a signed
integer field (stored, indexed, fast) holding the chunk's row id.  `add_integer_field` rather than
`add_unsigned_field`, which panicked on Python ints.

- Build location: `add` indexes into a private temporary directory; `save(directory)` copies the
  committed index there and reopens it from that directory.
- User text never reaches the query grammar as syntax: everything but word characters is replaced
  by spaces and the operator words AND / OR / NOT are dropped, so parsing cannot fail on user input
  (and if the parser still rejects something, the search returns nothing rather than raising).
- Filtering: the text query and a term-set query on `row` are combined as Must + Must, so tantivy
  only scores allowed documents.  The filter clause has a constant score of 0, so the returned
  score is the pure BM25 score.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import ClassVar

import numpy as np
import tantivy

from citadel import regex
from citadel.index.base import pad_results

TEXT_FIELD = "text"
ROW_FIELD = "row"
TOKENIZER = "en_stem"
META_FILE = "bm25.json"
TANTIVY_SUBDIR = "tantivy"
# Lock files belong to a live writer/reader of the source directory, never to a copy.
LOCK_FILE_PREFIX = ".tantivy-"

DEFAULT_WRITER_HEAP_BYTES = 64_000_000
DEFAULT_WRITER_THREADS = 1

# anything that is not a letter, digit or "_"
QUERY_SYNTAX_CHARACTERS = regex.compile(
    "index.bm25.query_syntax_characters", r"[^\w]+"
)
QUERY_OPERATOR_WORDS = frozenset({"AND", "OR", "NOT", "IN", "TO"})


def clean_query_text(query: str) -> str:
    """Reduce user text to plain lower-case words the tantivy parser reads as terms only."""
    words = QUERY_SYNTAX_CHARACTERS.sub(" ", query or "").split()
    return " ".join(word.lower() for word in words if word not in QUERY_OPERATOR_WORDS)


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field(TEXT_FIELD, stored=False, tokenizer_name=TOKENIZER)
    builder.add_integer_field(ROW_FIELD, stored=True, indexed=True, fast=True)
    return builder.build()


class BM25Index:
    """tantivy BM25 with row ids and filtering inside the search."""

    kind: ClassVar[str] = "bm25"

    def __init__(
        self,
        writer_heap_bytes: int = DEFAULT_WRITER_HEAP_BYTES,
        writer_threads: int = DEFAULT_WRITER_THREADS,
        build_root: str | None = None,
    ):
        self.writer_heap_bytes = int(writer_heap_bytes)
        self.writer_threads = int(writer_threads)
        self.build_root = build_root
        self._schema = build_schema()
        self._index: tantivy.Index | None = None
        self._directory: Path | None = None
        self._owns_directory = False
        self._cleanup: weakref.finalize | None = None
        self._num_docs = 0

    def __len__(self) -> int:
        return self._num_docs

    @property
    def directory(self) -> Path | None:
        return self._directory

    # -- build -------------------------------------------------------------------------------

    def add(self, texts: list[str], ids: np.ndarray) -> None:
        if self._index is not None:
            raise RuntimeError("BM25Index.add is called once per build")
        build_dir = self._new_build_dir()
        self._write(tantivy.Index(self._schema, path=str(build_dir)), texts, ids)

    @classmethod
    def extending(cls, base: Path, texts: list[str], ids: np.ndarray, build_root: str | None = None) -> "BM25Index":
        """A new index holding everything in the saved index `base` plus these rows, leaving `base`
        as it is. Term statistics then cover both, so scores stay comparable across old and new rows.

        tantivy files are write-once (a commit writes new segment files and replaces meta.json by
        rename), so the base's files are hard-linked, not copied: the cost is the new rows.
        """
        meta = json.loads((Path(base) / META_FILE).read_text())
        index = cls(**meta["params"], build_root=build_root)
        build_dir = index._new_build_dir()
        cls._copy_index_files(Path(base) / TANTIVY_SUBDIR, build_dir)
        index._write(tantivy.Index.open(str(build_dir)), texts, ids)
        return index

    def _new_build_dir(self) -> Path:
        """A private directory to build in, removed once `save` has copied it or when this object goes."""
        build_dir = Path(tempfile.mkdtemp(prefix="citadel-bm25-", dir=self.build_root))
        self._directory, self._owns_directory = build_dir, True
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(build_dir), True)
        return build_dir

    def _write(self, index: tantivy.Index, texts: list[str], ids: np.ndarray) -> None:
        row_ids = np.asarray(ids, dtype=np.int64).ravel()
        if len(texts) != row_ids.size:
            raise ValueError(f"{len(texts)} texts but {row_ids.size} ids")
        writer = index.writer(heap_size=self.writer_heap_bytes, num_threads=self.writer_threads)
        for text, row in zip(texts, row_ids.tolist()):
            writer.add_document(tantivy.Document(**{TEXT_FIELD: text or "", ROW_FIELD: row}))
        writer.commit()
        writer.wait_merging_threads()
        del writer  # releases the writer lock so the directory can be copied cleanly
        self._attach(index)

    def _attach(self, index: tantivy.Index) -> None:
        index.reload()
        self._index = index
        self._num_docs = index.searcher().num_docs

    # -- search ------------------------------------------------------------------------------

    def search(
        self, query: str, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        no_results = pad_results([], [], k)
        if self._index is None or self._num_docs == 0:
            return no_results
        text_query = self._parse(query)
        if text_query is None:
            return no_results
        if allowed is not None:
            allowed_rows = np.asarray(allowed, dtype=np.int64).ravel()
            if allowed_rows.size == 0:
                return no_results
            text_query = self._restrict(text_query, allowed_rows)
        searcher = self._index.searcher()
        hits = searcher.search(text_query, limit=k, count=False).hits
        if not hits:
            return no_results
        rows = searcher.fast_field_values(ROW_FIELD, [address for _, address in hits])
        return pad_results([score for score, _ in hits], rows, k)

    def _parse(self, query: str) -> tantivy.Query | None:
        cleaned = clean_query_text(query)
        if not cleaned:
            return None
        try:
            return self._index.parse_query(cleaned, [TEXT_FIELD])
        except ValueError:
            # Cleaning should make this unreachable; an unanswerable query is "no results".
            return None

    def _restrict(self, text_query: tantivy.Query, allowed_rows: np.ndarray) -> tantivy.Query:
        """Must(text) + Must(row in allowed): the filter is part of the search, scoring 0."""
        row_filter = tantivy.Query.term_set_query(self._schema, ROW_FIELD, allowed_rows.tolist())
        return tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, text_query),
                (tantivy.Occur.Must, tantivy.Query.const_score_query(row_filter, 0.0)),
            ]
        )

    # -- persistence -------------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        target = directory / TANTIVY_SUBDIR
        target.mkdir(parents=True, exist_ok=True)
        if self._directory is not None and self._directory.resolve() != target.resolve():
            self._copy_index_files(self._directory, target)
            if self._owns_directory:
                # Serve from the saved copy and drop the private build directory.
                self._directory, self._owns_directory = target, False
                self._attach(tantivy.Index.open(str(target)))
                self._cleanup()
        (directory / META_FILE).write_text(
            json.dumps(
                {
                    "kind": self.kind,
                    "params": {
                        "writer_heap_bytes": self.writer_heap_bytes,
                        "writer_threads": self.writer_threads,
                    },
                    "num_docs": self._num_docs,
                },
                indent=2,
            )
        )

    @staticmethod
    def _copy_index_files(source: Path, target: Path) -> None:
        """Segment files are hard-linked where the filesystem allows (tantivy writes them once and never
        changes them); its JSON bookkeeping (meta.json, .managed.json) is small and always copied."""
        for path in source.iterdir():
            if not path.is_file() or path.name.startswith(LOCK_FILE_PREFIX):
                continue
            if path.suffix != ".json":
                try:
                    os.link(path, target / path.name)
                    continue
                except OSError:
                    pass
            shutil.copy2(path, target / path.name)

    @classmethod
    def load(cls, directory: Path) -> "BM25Index":
        directory = Path(directory)
        meta = json.loads((directory / META_FILE).read_text())
        index = cls(**meta["params"])
        tantivy_dir = directory / TANTIVY_SUBDIR
        if any(tantivy_dir.glob("meta.json")):
            index._directory = tantivy_dir
            index._attach(tantivy.Index.open(str(tantivy_dir)))
        return index
