"""A segment written before the governance columns existed reads in today's chunk-table schema (the
columns null), so its rows stack and concatenate with new ones."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from citadel.segments.build import CHUNK_SCHEMA, chunks_to_table, read_chunk_table
from citadel.types import Chunk, Governance


def test_an_older_chunk_table_gains_the_governance_columns_as_nulls(tmp_path):
    governed = Chunk("t:d:v2:0000", "t", "d", 2, 0, "Doc", ("Doc", "A"), None, "text", "Doc > A", "h", "d.md",
                     governance=Governance("P-1", "2", "internal", "standard"))
    new = chunks_to_table([governed])
    old_schema = pa.schema([f for f in CHUNK_SCHEMA if f.name not in ("policy_id", "policy_revision", "sensitivity",
                                                                     "retention_class")])
    pq.write_table(new.select(old_schema.names).cast(old_schema), tmp_path / "old.parquet")
    old = read_chunk_table(tmp_path / "old.parquet")
    assert old.schema.equals(CHUNK_SCHEMA) and old.column("policy_id").to_pylist() == [None]
    both = pa.concat_tables([old, new])
    assert both.column("policy_id").to_pylist() == [None, "P-1"]
    assert both.column("sensitivity").to_pylist() == [None, "internal"]
