-- Calls are counted by checksum only within an execution (the loop guard):
-- calls outside one need no entry.
DROP INDEX objects_by_checksum;
CREATE INDEX objects_by_checksum ON objects (kind, namespace, execution, checksum)
    WHERE checksum IS NOT NULL AND execution IS NOT NULL;
