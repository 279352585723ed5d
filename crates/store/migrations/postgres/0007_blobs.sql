-- Artifact contents in the shared database, so that every replica reads
-- what any replica stored, with no shared directory. Named by sha256;
-- `written_at` dates the last put, which orphan collection compares with
-- its grace period.
CREATE TABLE blobs (
    sha256     TEXT        NOT NULL PRIMARY KEY,
    size       BIGINT      NOT NULL,
    content    BYTEA       NOT NULL,
    written_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
