-- Citadel catalog schema, Postgres (citadel/catalog/postgres.py). The same tables, keys and rules as
-- the SQLite reference (citadel/catalog/schema.sql); applied once by citadel/catalog/migrations/.
CREATE TABLE tenants (
    tenant_id   TEXT PRIMARY KEY,
    created_at  DOUBLE PRECISION NOT NULL
);
CREATE TABLE documents (
    tenant_id         TEXT NOT NULL REFERENCES tenants(tenant_id),
    document_id       TEXT NOT NULL,
    title             TEXT NOT NULL,
    source            TEXT NOT NULL,
    owner             TEXT NOT NULL DEFAULT '',
    visibility        TEXT NOT NULL CHECK (visibility IN ('tenant', 'groups')),
    effective_date    TEXT,
    supersedes        TEXT,
    status            TEXT NOT NULL CHECK (status IN ('draft','published','superseded','archived','withdrawn')),
    published_version INTEGER,
    acl_version       INTEGER NOT NULL DEFAULT 1,
    updated_at        DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant_id, document_id)
);
CREATE TABLE document_versions (
    tenant_id     TEXT NOT NULL,
    document_id   TEXT NOT NULL,
    version       INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('draft','published','superseded','archived','withdrawn')),
    content_hash  TEXT NOT NULL,
    chunk_count   INTEGER NOT NULL,
    segment_id    TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    created_at    DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant_id, document_id, version)
);
CREATE TABLE document_acl (
    tenant_id   TEXT NOT NULL,
    document_id TEXT NOT NULL,
    group_name  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, document_id, group_name)
);
CREATE INDEX acl_by_group ON document_acl (tenant_id, group_name);
CREATE TABLE chunk_manifests (
    tenant_id    TEXT NOT NULL,
    document_id  TEXT NOT NULL,
    version      INTEGER NOT NULL,
    chunk_id     TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    PRIMARY KEY (tenant_id, document_id, version, chunk_id)
);
CREATE TABLE partitions (
    tenant_id    TEXT PRIMARY KEY,
    segment_id   TEXT NOT NULL,
    tier         TEXT NOT NULL,
    generation   INTEGER NOT NULL,
    published_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE jobs (
    job_id      TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    kind        TEXT NOT NULL,
    status      TEXT NOT NULL,
    created_at  DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION,
    report      TEXT
);
CREATE TABLE dead_letters (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      TEXT NOT NULL,
    tenant_id   TEXT NOT NULL,
    source      TEXT NOT NULL,
    code        TEXT NOT NULL,
    reason      TEXT NOT NULL,
    meta        TEXT NOT NULL,
    created_at  DOUBLE PRECISION NOT NULL,
    retried_at  DOUBLE PRECISION
);
CREATE TABLE audit_log (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts        DOUBLE PRECISION NOT NULL,
    actor     TEXT NOT NULL,
    action    TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    target    TEXT NOT NULL,
    detail    TEXT NOT NULL
);
-- Append-only tables: a row trigger refuses every change (and, for the audit log, every removal).
CREATE FUNCTION citadel_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END;
$$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION citadel_append_only();
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION citadel_append_only();
-- One row per answered request, cache hits included; the retention purge (by age) is the only deleter.
CREATE TABLE answer_log (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id     TEXT NOT NULL,
    correlation_id TEXT,
    ts             DOUBLE PRECISION NOT NULL,
    tenant_id      TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    question       TEXT NOT NULL,
    response       TEXT NOT NULL,
    cached         BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX answer_log_by_ts ON answer_log (ts);
CREATE INDEX answer_log_by_request ON answer_log (request_id);
CREATE TRIGGER answer_log_no_update BEFORE UPDATE ON answer_log
    FOR EACH ROW EXECUTE FUNCTION citadel_append_only();
-- Feedback on an answer, with the sources and versions it cited. Append-only, like the answer log.
CREATE TABLE answer_feedback (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    answer_id  TEXT NOT NULL,
    ts         DOUBLE PRECISION NOT NULL,
    tenant_id  TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    vote       TEXT NOT NULL,
    reason     TEXT,
    comment    TEXT NOT NULL,
    sources    TEXT NOT NULL
);
CREATE INDEX answer_feedback_by_tenant ON answer_feedback (tenant_id, ts);
CREATE TRIGGER answer_feedback_no_update BEFORE UPDATE ON answer_feedback
    FOR EACH ROW EXECUTE FUNCTION citadel_append_only();
