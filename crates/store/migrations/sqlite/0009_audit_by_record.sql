-- A record's audit entries, found without walking the chain: a call's page
-- shows the entries of the ToolCall and of its Approval (which shares the
-- call's name). An index on the entry body's `name`, so that no column
-- is added to the hashed chain and existing entries are covered at once.
-- (A body that is not JSON, which only tests append, indexes as NULL.)
CREATE INDEX audit_by_record
    ON audit (namespace, (CASE WHEN json_valid(body) THEN json_extract(body, '$.name') END), seq);
