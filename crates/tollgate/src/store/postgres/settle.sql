-- Refunds and charges of token buckets outside a decision (a reservation committed): a port of
-- Gcra::refund and Gcra::charge (algorithm/gcra.rs) in integer microseconds, every bucket in one
-- statement, at most once per id. Atomic at READ COMMITTED: the upsert locks each row (in key
-- order, so concurrent settlements never deadlock) and re-reads it if another transaction
-- changed it.
--
--   $1 keys (bytea[], distinct)   $2 t, µs per token   $3 charge (bool[]: false refunds)
--   $4 amount (capped by the caller so that amount × t <= 2^52)
--   $5 now in µs, or NULL for clock_timestamp()   $6 a once-id, or NULL   $7 its TTL in µs
--   $8 tau (bigint[]: capacity × t)
--
-- A once-id is recorded in `<table>_once` until it expires; a second settlement under it (here
-- or on any process sharing the database) changes nothing. A charge puts a bucket at most one
-- capacity into debt in total (tat <= now + 2 tau), and at most 2^51 µs (Gcra::charge's
-- MAX_DEBT), and never lowers its tat; a refund never moves a bucket past full (tat = now), and
-- a full bucket stays as it is.
--
-- A bucket whose tat this version never writes (negative, or more than 2^52 µs past now) is
-- garbage: nothing is settled and the once-id is not recorded; the caller reports it, and the
-- cleanup deletes the row.
--
-- Returns one row per key, in the order given: now; whether the settlement happened; the
-- bucket's tat afterwards (NULL when it did not happen); whether a bucket was garbage.
WITH clock AS (
    SELECT coalesce($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) AS now
), spoilt AS (
    SELECT EXISTS (
        SELECT FROM "@schema@"."@table@" AS b, clock
        WHERE b.key = ANY($1::bytea[]) AND (b.tat < 0 OR b.tat > clock.now + 4503599627370496)
    ) AS garbage
), once AS (
    INSERT INTO "@schema@"."@table@_once" AS o (id, expires)
    SELECT $6::bytea, clock.now + $7::bigint FROM clock, spoilt
    WHERE $6::bytea IS NOT NULL AND NOT spoilt.garbage
    ON CONFLICT (id) DO UPDATE SET expires = excluded.expires
        WHERE o.expires <= (SELECT now FROM clock)
    RETURNING 1
), go AS (
    SELECT NOT spoilt.garbage AND ($6::bytea IS NULL OR EXISTS (SELECT FROM once)) AS ok
    FROM spoilt
), input AS (
    SELECT *, least(2 * tau, 2251799813685248) AS debt
    FROM unnest($1::bytea[], $2::bigint[], $3::bool[], $4::bigint[], $8::bigint[])
        WITH ORDINALITY AS i(key, t, charge, amount, tau, n)
), settled AS (
    INSERT INTO "@schema@"."@table@" AS b (key, tat, t, tau)
    SELECT input.key,
           CASE WHEN input.charge
                THEN clock.now + least(input.amount * input.t, input.debt)
                ELSE 0 END,
           input.t, input.tau
    FROM input, clock, go WHERE go.ok ORDER BY input.key
    -- The row's tat, rebased to these numbers first when it has others (schema.sql).
    ON CONFLICT (key) DO UPDATE SET tat = (
        SELECT CASE
            WHEN i.charge THEN greatest(r.tat, c.now, least(greatest(r.tat, c.now)
                                     + i.amount * i.t, c.now + i.debt))
            WHEN r.tat > c.now THEN greatest(r.tat - i.amount * i.t, c.now)
            ELSE r.tat END
        FROM input AS i, clock AS c,
            LATERAL (SELECT "@schema@"."@table@_rebase"(b.tat, b.t, b.tau, i.t, i.tau, c.now)
                     AS tat) AS r
        WHERE i.key = excluded.key),
        t = excluded.t, tau = excluded.tau
    RETURNING b.key, b.tat
)
SELECT clock.now, go.ok, settled.tat, spoilt.garbage
FROM input CROSS JOIN clock CROSS JOIN go CROSS JOIN spoilt
    LEFT JOIN settled ON settled.key = input.key
ORDER BY input.n
