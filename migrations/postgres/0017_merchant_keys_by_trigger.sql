-- Events and deliveries no longer hold foreign keys to merchants; a trigger
-- on merchants keeps what the keys kept (docs/decisions.md, "Intake checks
-- merchants by reading them; a trigger guards their deletion").
--
-- A foreign key check locks the referenced row (FOR KEY SHARE): every event
-- and every delivery that intake stored locked its merchant's row, which
-- wrote the row's header and a WAL record each time, and the intakes of two
-- instances storing events of one merchant at once turned the locks into
-- multixacts. Intake now stores only events whose merchant exists (a
-- semi-join in its statement, which reads and locks nothing), and merchants
-- are never deleted by Sluice, so the keys guarded only against SQL run by
-- hand. This trigger guards that: a merchant that events refer to cannot be
-- deleted, nor its id changed, just as the keys refused it (SQLSTATE 23503,
-- foreign_key_violation). It looks in events (their unique index leads with
-- merchant_id) and in deliveries, since the schema lets a delivery name
-- another merchant than its event's (a fan-out): through the listing index
-- by merchant for rows not in flight, and through the index of rows in
-- flight for the rest, so a hand-run delete never scans the outbox.
ALTER TABLE events DROP CONSTRAINT events_merchant_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_merchant_id_fkey;

CREATE FUNCTION sluice_merchant_in_use() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM events WHERE merchant_id = OLD.id)
        OR EXISTS (SELECT 1 FROM deliveries WHERE merchant_id = OLD.id AND status <> 'DELIVERING')
        OR EXISTS (SELECT 1 FROM deliveries WHERE merchant_id = OLD.id AND status = 'DELIVERING') THEN
        RAISE EXCEPTION 'merchant % still has events or deliveries', OLD.id USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER merchants_in_use BEFORE DELETE OR UPDATE OF id ON merchants
    FOR EACH ROW EXECUTE FUNCTION sluice_merchant_in_use();
