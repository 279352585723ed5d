-- Cost reports and budgets sum ToolCall costs by tool, agent, execution or
-- namespace since a time: columns the store can sum without reading bodies.
ALTER TABLE objects ADD COLUMN agent TEXT;
ALTER TABLE objects ADD COLUMN cost_micros INTEGER;
ALTER TABLE objects ADD COLUMN cost_currency TEXT;
ALTER TABLE objects ADD COLUMN cost_at INTEGER;
CREATE INDEX objects_by_cost_time ON objects (kind, namespace, cost_at) WHERE cost_micros IS NOT NULL;
CREATE INDEX objects_by_cost_execution ON objects (kind, namespace, execution, cost_at) WHERE cost_micros IS NOT NULL;
