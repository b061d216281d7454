-- Citadel catalog schema (SQLite). The catalog is the live permission source (DESIGN.md §3).
CREATE TABLE IF NOT EXISTS tenants (
    tenant_id   TEXT PRIMARY KEY,
    created_at  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
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
    updated_at        REAL NOT NULL,
    PRIMARY KEY (tenant_id, document_id)
);
CREATE TABLE IF NOT EXISTS document_versions (
    tenant_id     TEXT NOT NULL,
    document_id   TEXT NOT NULL,
    version       INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('draft','published','superseded','archived','withdrawn')),
    content_hash  TEXT NOT NULL,
    chunk_count   INTEGER NOT NULL,
    segment_id    TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    created_at    REAL NOT NULL,
    PRIMARY KEY (tenant_id, document_id, version)
);
CREATE TABLE IF NOT EXISTS document_acl (
    tenant_id   TEXT NOT NULL,
    document_id TEXT NOT NULL,
    group_name  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, document_id, group_name)
);
CREATE INDEX IF NOT EXISTS acl_by_group ON document_acl (tenant_id, group_name);
CREATE TABLE IF NOT EXISTS chunk_manifests (
    tenant_id    TEXT NOT NULL,
    document_id  TEXT NOT NULL,
    version      INTEGER NOT NULL,
    chunk_id     TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    PRIMARY KEY (tenant_id, document_id, version, chunk_id)
);
CREATE TABLE IF NOT EXISTS partitions (
    tenant_id    TEXT PRIMARY KEY,
    segment_id   TEXT NOT NULL,
    tier         TEXT NOT NULL,
    generation   INTEGER NOT NULL,
    published_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    job_id      TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    kind        TEXT NOT NULL,
    status      TEXT NOT NULL,
    created_at  REAL NOT NULL,
    finished_at REAL,
    report      TEXT
);
CREATE TABLE IF NOT EXISTS dead_letters (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      TEXT NOT NULL,
    tenant_id   TEXT NOT NULL,
    source      TEXT NOT NULL,
    code        TEXT NOT NULL,
    reason      TEXT NOT NULL,
    meta        TEXT NOT NULL,
    created_at  REAL NOT NULL,
    retried_at  REAL
);
CREATE TABLE IF NOT EXISTS audit_log (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    ts        REAL NOT NULL,
    actor     TEXT NOT NULL,
    action    TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    target    TEXT NOT NULL,
    detail    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS answer_log (
    request_id TEXT PRIMARY KEY,
    ts         REAL NOT NULL,
    tenant_id  TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    question   TEXT NOT NULL,
    response   TEXT NOT NULL
);
