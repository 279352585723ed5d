-- The tamper-evident audit: per namespace, an append-only hash chain.
-- `hash` = sha256(prev + "\n" + body), computed by joch, not the database.
CREATE TABLE audit (
    namespace TEXT   NOT NULL,
    seq       BIGINT NOT NULL,
    prev      TEXT   NOT NULL,
    hash      TEXT   NOT NULL,
    body      TEXT   NOT NULL,
    PRIMARY KEY (namespace, seq)
);

-- Each namespace's last entry. An append first locks this row (an upsert,
-- which creates it for a namespace's first entry) and holds it until it
-- commits, so appends from every replica take turns: the chain never forks,
-- and its order is the commit order.
CREATE TABLE audit_heads (
    namespace TEXT   NOT NULL PRIMARY KEY,
    seq       BIGINT NOT NULL,
    hash      TEXT   NOT NULL
);
