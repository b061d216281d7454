-- Governance of each document version as the trusted catalog states it (citadel.types.Governance):
-- its policy id and revision, sensitivity and retention class, written with the version at publish
-- from the ACL file or the admin API, never from the document's content. One row per version that
-- states any of them; GET /v1/policies/{id} reads a tenant's current version of a policy id.
CREATE TABLE document_governance (
    tenant_id        TEXT NOT NULL,
    document_id      TEXT NOT NULL,
    version          INTEGER NOT NULL,
    policy_id        TEXT,
    policy_revision  TEXT,
    sensitivity      TEXT,
    retention_class  TEXT,
    PRIMARY KEY (tenant_id, document_id, version)
);
CREATE INDEX document_governance_by_policy ON document_governance (tenant_id, policy_id);
CREATE INDEX document_governance_by_class ON document_governance (retention_class);
