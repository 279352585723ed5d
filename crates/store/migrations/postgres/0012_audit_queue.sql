-- Audit entries committed with their records and not yet linked into their
-- namespace's chain. An audited write queues its entry here and locks no
-- shared row, so the writes of every replica commit side by side; a linker
-- then moves what is queued into `audit`, numbered and hashed, under the
-- namespace's `audit_heads` lock (see the store's `chain.rs`).
CREATE TABLE audit_queue (
    id        BIGSERIAL PRIMARY KEY,
    namespace TEXT NOT NULL,
    body      TEXT NOT NULL
);
CREATE INDEX audit_queue_by_namespace ON audit_queue (namespace, id);
