-- Tiering by size and traffic (citadel/segments/tiering.py). tenant_traffic: the queries each tenant's
-- partition served per UTC day (day = floor(epoch seconds / 86400)), added to by every serving replica
-- (citadel/retrieval/traffic.py); one row per tenant per day, days past the window purged.
-- partition_tiers: the tier each tenant's published partition is in and when it entered it (a publish
-- in the same tier keeps the time), so a move honours the minimum stay.
CREATE TABLE tenant_traffic (
    tenant_id  TEXT NOT NULL,
    day        INTEGER NOT NULL,
    queries    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, day)
);
CREATE INDEX tenant_traffic_by_day ON tenant_traffic (day);
CREATE TABLE partition_tiers (
    tenant_id   TEXT PRIMARY KEY,
    tier        TEXT NOT NULL,
    entered_at  DOUBLE PRECISION NOT NULL
);
