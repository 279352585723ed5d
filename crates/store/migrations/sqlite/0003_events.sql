-- The timeline of each execution: append-only, numbered 1, 2, 3... per
-- execution in the order the events were written.
CREATE TABLE events (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT    NOT NULL,
    execution TEXT    NOT NULL,
    sequence  INTEGER NOT NULL,
    body      TEXT    NOT NULL,
    UNIQUE (namespace, execution, sequence)
);
