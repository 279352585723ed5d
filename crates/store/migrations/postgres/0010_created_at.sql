-- A ToolCall's creation time (unix milliseconds), so that a list narrowed to
-- a time range (the ledger's) is served by an index rather than by reading
-- calls newest first until the range is reached. The index ends with `seq`:
-- a ranged list runs by (created_at, seq), which is its keyset. The column
-- is written once, by the insert; calls stored before it are filled in from
-- their bodies (creationTimestamp, RFC 3339 with milliseconds; a body joch
-- wrote is JSON; the CASE keeps a test's non-JSON body out).
ALTER TABLE objects ADD COLUMN created_at BIGINT;
UPDATE objects
   SET created_at = CASE WHEN body LIKE '{%' THEN
       (extract(epoch FROM (body::jsonb #>> '{metadata,creationTimestamp}')::timestamptz) * 1000)::BIGINT
   END
 WHERE kind = 'ToolCall';
CREATE INDEX objects_by_created ON objects (kind, namespace, created_at, seq) WHERE created_at IS NOT NULL;
