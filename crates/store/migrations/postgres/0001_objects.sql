-- Every resource, ToolCalls included, is one row: the object as JSON plus the
-- columns that lookups and lists filter on. `seq` orders lists (newest first)
-- and is never reused, so `continue` tokens stay valid across deletes.
--
-- `body` is TEXT, not JSONB: it must read back byte for byte as written.
-- `labels` is JSONB: today the label selector is matched in Rust while
-- stepping through rows (as in SQLite), but JSONB lets a later version push
-- it down as `labels @> ...` with a GIN index, without migrating the data.
CREATE TABLE objects (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             TEXT   NOT NULL,
    namespace        TEXT   NOT NULL,
    name             TEXT   NOT NULL,
    resource_version BIGINT NOT NULL,
    labels           JSONB  NOT NULL DEFAULT '{}',
    tool             TEXT,
    phase            TEXT,
    execution        TEXT,
    checksum         TEXT,
    agent            TEXT,
    cost_micros      BIGINT,
    cost_currency    TEXT,
    cost_at          BIGINT, -- unix milliseconds
    body             TEXT   NOT NULL,
    UNIQUE (kind, namespace, name)
);

CREATE INDEX objects_by_kind      ON objects (kind, namespace, seq);
CREATE INDEX objects_by_tool      ON objects (kind, namespace, tool, seq)      WHERE tool IS NOT NULL;
CREATE INDEX objects_by_phase     ON objects (kind, namespace, phase, seq)     WHERE phase IS NOT NULL;
CREATE INDEX objects_by_execution ON objects (kind, namespace, execution, seq) WHERE execution IS NOT NULL;
-- ToolCalls are counted by checksum within an execution (the policies'
-- `toolCallCount` loop guard): an indexed count, not a scan of the run.
CREATE INDEX objects_by_checksum  ON objects (kind, namespace, execution, checksum) WHERE checksum IS NOT NULL;
-- Cost reports and budgets sum ToolCall costs by tool, agent, execution or
-- namespace since a time, without reading bodies.
CREATE INDEX objects_by_cost_time      ON objects (kind, namespace, cost_at)            WHERE cost_micros IS NOT NULL;
CREATE INDEX objects_by_cost_execution ON objects (kind, namespace, execution, cost_at) WHERE cost_micros IS NOT NULL;
