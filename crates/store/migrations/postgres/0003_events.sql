-- The timeline of each execution: append-only, numbered 1, 2, 3... per
-- execution in the order the events were committed.
CREATE TABLE events (
    namespace TEXT   NOT NULL,
    execution TEXT   NOT NULL,
    sequence  BIGINT NOT NULL,
    body      TEXT   NOT NULL,
    PRIMARY KEY (namespace, execution, sequence)
);

-- The last number given out per execution. Appending upserts this row, which
-- locks it until the append commits: replicas appending to one execution
-- take turns, so numbers are never shared or skipped, and a reader that sees
-- event N also sees every event before it.
CREATE TABLE event_heads (
    namespace TEXT   NOT NULL,
    execution TEXT   NOT NULL,
    sequence  BIGINT NOT NULL,
    PRIMARY KEY (namespace, execution)
);
