-- One row per live idempotency key. The primary key is what makes "same key,
-- one execution" hold across concurrent requests, restarts and (with a shared
-- database) replicas. A row whose expires_at has passed may be replaced.
CREATE TABLE idempotency_keys (
    namespace  TEXT    NOT NULL,
    tool       TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    call       TEXT    NOT NULL,
    checksum   TEXT    NOT NULL,
    expires_at INTEGER NOT NULL, -- unix milliseconds
    PRIMARY KEY (namespace, tool, key)
);

CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
