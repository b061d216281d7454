-- Durable ingestion jobs (citadel/ingest/runner.py): the work of each queued job (its `jobs` row keeps
-- status and report), the document version it reserved, and the lease of the runner working on it.
-- state: queued (waiting for a runner), leased (a runner, `owner`, holds it until `lease_expires_at`
-- unless it renews), done. A leased job whose lease ran out is claimed by the next runner.
CREATE TABLE job_queue (
    job_id            TEXT PRIMARY KEY,
    tenant_id         TEXT NOT NULL,
    document_id       TEXT NOT NULL,
    version           INTEGER NOT NULL,
    spec              TEXT NOT NULL,
    state             TEXT NOT NULL CHECK (state IN ('queued', 'leased', 'done')),
    owner             TEXT,
    lease_expires_at  DOUBLE PRECISION,
    attempts          INTEGER NOT NULL,
    progress          TEXT,
    queued_at         DOUBLE PRECISION NOT NULL
);
CREATE INDEX job_queue_by_state ON job_queue (state, queued_at);
CREATE INDEX job_queue_by_document ON job_queue (tenant_id, document_id, version);
