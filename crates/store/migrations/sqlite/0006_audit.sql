-- The tamper-evident audit: per namespace, an append-only hash chain.
-- `hash` = sha256(prev + "\n" + body); the writer links each entry to the
-- namespace's last one, so the chain's order is the commit order.
CREATE TABLE audit (
    namespace TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    prev      TEXT NOT NULL,
    hash      TEXT NOT NULL,
    body      TEXT NOT NULL,
    PRIMARY KEY (namespace, seq)
) WITHOUT ROWID;
