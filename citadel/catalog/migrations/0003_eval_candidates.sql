-- Candidate test items waiting for an owner's label (citadel/quality/candidates.py): the same table,
-- keys and rules as the SQLite reference (citadel/catalog/schema.sql).
CREATE TABLE eval_candidates (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    source      TEXT NOT NULL,
    origin      TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('pending', 'promoted', 'dismissed')),
    item        TEXT NOT NULL,
    label       TEXT,
    created_at  DOUBLE PRECISION NOT NULL,
    decided_at  DOUBLE PRECISION,
    decided_by  TEXT,
    UNIQUE (tenant_id, source, origin)
);
CREATE INDEX eval_candidates_by_status ON eval_candidates (tenant_id, status, source);
