-- Every committed change to an object or a timeline is announced on the
-- `joch_changes` channel, so that each replica's caches, waiting callers and
-- event followers learn of writes made by the others at once. PostgreSQL
-- delivers a notification only when its transaction commits, and folds
-- repeats of one payload within a transaction.
CREATE FUNCTION joch_notify_object() RETURNS trigger AS $$
DECLARE
    changed objects%ROWTYPE;
BEGIN
    IF TG_OP = 'DELETE' THEN changed := OLD; ELSE changed := NEW; END IF;
    PERFORM pg_notify('joch_changes',
        changed.kind || E'\t' || changed.namespace || E'\t' || changed.name);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER objects_notify AFTER INSERT OR UPDATE OR DELETE ON objects
    FOR EACH ROW EXECUTE FUNCTION joch_notify_object();

CREATE FUNCTION joch_notify_event() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('joch_changes',
        'Event' || E'\t' || NEW.namespace || E'\t' || NEW.execution);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION joch_notify_event();
