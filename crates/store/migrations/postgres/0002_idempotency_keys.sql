-- One row per live idempotency key. The primary key is what makes "same key,
-- one execution" hold across concurrent requests, restarts and replicas: a
-- claim is one INSERT ... ON CONFLICT, which replaces the row only once its
-- expires_at has passed, in the same transaction as the call's insert.
CREATE TABLE idempotency_keys (
    namespace  TEXT   NOT NULL,
    tool       TEXT   NOT NULL,
    key        TEXT   NOT NULL,
    call       TEXT   NOT NULL,
    checksum   TEXT   NOT NULL,
    expires_at BIGINT NOT NULL, -- unix milliseconds
    PRIMARY KEY (namespace, tool, key)
);

CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
