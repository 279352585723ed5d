-- Rate limits counted in the store (GCRA): per limit and key, the time
-- (Unix ms) at which its allowance is whole again.
CREATE TABLE rate_cells (
    namespace  TEXT    NOT NULL,
    rate_limit TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    tat        INTEGER NOT NULL,
    PRIMARY KEY (namespace, rate_limit, key)
) WITHOUT ROWID;
