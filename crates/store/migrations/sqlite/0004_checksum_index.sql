-- ToolCalls are counted by checksum within an execution (the policies'
-- `toolCallCount` loop guard): an indexed count, not a scan of the run.
ALTER TABLE objects ADD COLUMN checksum TEXT;
CREATE INDEX objects_by_checksum ON objects (kind, namespace, execution, checksum) WHERE checksum IS NOT NULL;
