-- A record's audit entries, found without walking the chain: a call's page
-- shows the entries of the ToolCall and of its Approval (which shares the
-- call's name). An index on the entry body's `name`, so that no column
-- is added to the hashed chain and existing entries are covered at once.
-- The body is canonical JSON (RFC 8785: no spaces, `name` the only key of
-- that spelling), so the name is read by pattern: a cast to json would
-- refuse a body that is not JSON, which only tests append.
CREATE INDEX audit_by_record
    ON audit (namespace, (substring(body from '"name":"([^"]*)"')), seq);
