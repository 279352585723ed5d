-- Changes are no longer announced by triggers inside the writing
-- transaction: PostgreSQL holds one lock for the whole cluster from the
-- commit of a transaction that notified until its commit is flushed, so
-- every writing transaction of every replica committed, and flushed, one
-- after another (bench/RESULTS.md, issue 23). Each store now announces its
-- own writes once they have committed, many in one notifying transaction
-- of its own (`changes.rs`), and the writes group-commit freely.
DROP TRIGGER objects_notify ON objects;
DROP TRIGGER events_notify ON events;
DROP FUNCTION joch_notify_object();
DROP FUNCTION joch_notify_event();
