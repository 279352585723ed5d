-- Every resource, ToolCalls included, is one row: the object as JSON plus the
-- columns that lookups and lists filter on. `seq` orders lists (newest first)
-- and is never reused, so `continue` tokens stay valid across deletes.
CREATE TABLE objects (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT    NOT NULL,
    namespace        TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    resource_version INTEGER NOT NULL,
    labels           TEXT    NOT NULL DEFAULT '{}',
    tool             TEXT,
    phase            TEXT,
    execution        TEXT,
    body             TEXT    NOT NULL,
    UNIQUE (kind, namespace, name)
);

CREATE INDEX objects_by_kind      ON objects (kind, namespace, seq);
CREATE INDEX objects_by_tool      ON objects (kind, namespace, tool, seq)      WHERE tool IS NOT NULL;
CREATE INDEX objects_by_phase     ON objects (kind, namespace, phase, seq)     WHERE phase IS NOT NULL;
CREATE INDEX objects_by_execution ON objects (kind, namespace, execution, seq) WHERE execution IS NOT NULL;
