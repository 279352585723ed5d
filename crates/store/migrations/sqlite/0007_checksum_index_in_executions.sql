-- Calls are counted by checksum only within an execution (the loop guard):
-- calls outside one need no entry, and their random checksums made every
-- insert dirty a different index page.
DROP INDEX objects_by_checksum;
CREATE INDEX objects_by_checksum ON objects (kind, namespace, execution, checksum)
    WHERE checksum IS NOT NULL AND execution IS NOT NULL;
