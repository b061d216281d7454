-- Prompts and replies kept for investigation, encrypted (AES-GCM) before they reach the catalog:
-- only the key id, the nonce and the ciphertext are stored (citadel/guardrails/prompt_vault.py).
-- Purged with the answer log after answer.prompt_retention_days; rows are never changed.
CREATE TABLE prompt_vault (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id  TEXT NOT NULL,
    ts          DOUBLE PRECISION NOT NULL,
    tenant_id   TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    kid         TEXT NOT NULL,
    nonce       BYTEA NOT NULL,
    ciphertext  BYTEA NOT NULL
);
CREATE INDEX prompt_vault_by_request ON prompt_vault (request_id);
CREATE INDEX prompt_vault_by_ts ON prompt_vault (ts);
CREATE TRIGGER prompt_vault_no_update BEFORE UPDATE ON prompt_vault
    FOR EACH ROW EXECUTE FUNCTION citadel_append_only();
