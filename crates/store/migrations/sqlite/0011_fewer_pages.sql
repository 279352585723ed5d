-- Fewer pages written per ToolCall (issue 23): a synced commit's cost grows
-- with the pages it writes, about 7 µs each on the project's machine, and a
-- call's insert wrote one for every index it touched.
--
-- * `seq` without AUTOINCREMENT: SQLite then takes the highest `seq` plus
--   one, so the counter in `sqlite_sequence` (one more page a commit) goes.
--   A `seq` can now come back only for the newest object, after it was
--   deleted; a `continue` token names a position in a list already begun,
--   and an object created after it is outside that list either way.
-- * `objects_by_kind` holds only objects without a creation time, that is
--   every kind but ToolCall. A namespace's ToolCalls are listed by
--   `objects_by_created`, newest first by creation, which the ledger's
--   ranged lists already did.
--
-- SQLite cannot drop AUTOINCREMENT in place: the table is copied.
CREATE TABLE objects_new (
    seq              INTEGER PRIMARY KEY,
    kind             TEXT    NOT NULL,
    namespace        TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    resource_version INTEGER NOT NULL,
    labels           TEXT    NOT NULL DEFAULT '{}',
    tool             TEXT,
    phase            TEXT,
    execution        TEXT,
    body             TEXT    NOT NULL,
    checksum         TEXT,
    agent            TEXT,
    cost_micros      INTEGER,
    cost_currency    TEXT,
    cost_at          INTEGER,
    created_at       INTEGER,
    UNIQUE (kind, namespace, name)
);
INSERT INTO objects_new
    (seq, kind, namespace, name, resource_version, labels, tool, phase, execution, body,
     checksum, agent, cost_micros, cost_currency, cost_at, created_at)
SELECT seq, kind, namespace, name, resource_version, labels, tool, phase, execution, body,
       checksum, agent, cost_micros, cost_currency, cost_at, created_at
  FROM objects;
DROP TABLE objects;
ALTER TABLE objects_new RENAME TO objects;

CREATE INDEX objects_by_kind           ON objects (kind, namespace, seq)                WHERE created_at IS NULL;
CREATE INDEX objects_by_tool           ON objects (kind, namespace, tool, seq)          WHERE tool IS NOT NULL;
CREATE INDEX objects_by_phase          ON objects (kind, namespace, phase, seq)         WHERE phase IS NOT NULL;
CREATE INDEX objects_by_execution      ON objects (kind, namespace, execution, seq)     WHERE execution IS NOT NULL;
CREATE INDEX objects_by_checksum       ON objects (kind, namespace, execution, checksum)
    WHERE checksum IS NOT NULL AND execution IS NOT NULL;
CREATE INDEX objects_by_cost_time      ON objects (kind, namespace, cost_at)            WHERE cost_micros IS NOT NULL;
CREATE INDEX objects_by_cost_execution ON objects (kind, namespace, execution, cost_at) WHERE cost_micros IS NOT NULL;
CREATE INDEX objects_by_created        ON objects (kind, namespace, created_at, seq)    WHERE created_at IS NOT NULL;
