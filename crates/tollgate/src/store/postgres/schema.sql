-- tollgate's PostgreSQL schema: one table of token buckets and the function that decides
-- several checks at once. `@schema@`, `@table@` and `@unlogged@` are filled in by schema.rs
-- (identifiers are checked to be plain lowercase names first).
--
-- Table: one row per bucket.
--   key  the bucket: `v2:tb:=<name length>:<policy name>:` (or, for a check without a name,
--        `v2:tb:#<capacity>:<refill>:<period_ns>:`) followed by the user's key, raw bytes
--        (bytea: nothing to escape, nothing to collide); see call.rs. Named by the policy's
--        name, not its numbers: they may change and the bucket's state carries over. Rows of
--        the v1 layout are never read, and the cleanup deletes them once full;
--   tat  the theoretical arrival time (GCRA) in microseconds of the database's clock: the
--        time at which the bucket is full again. A missing row, or one whose tat has passed,
--        is a full bucket, so idle rows can be deleted at any time.
--
-- The table may be UNLOGGED: rate-limit state is ephemeral, and an unlogged table skips the
-- write-ahead log. After a crash PostgreSQL empties it (every bucket is full again), and
-- replicas do not have it.

CREATE SCHEMA IF NOT EXISTS "@schema@";

CREATE @unlogged@ TABLE IF NOT EXISTS "@schema@"."@table@" (
    key bytea PRIMARY KEY,
    tat bigint NOT NULL
);

-- Decides a list of decisions in order, each all-or-nothing over its checks, with the state of
-- every bucket carried from one decision to the next: a port of algorithm/gcra.rs (through
-- algorithm::decide_all), as bucket.lua is for Redis. One call, one transaction, two
-- statements whatever the number of buckets: one upsert locks every row in key order (so
-- concurrent calls never deadlock), creating missing ones as full buckets; one update writes
-- back the rows that changed. (A statement per bucket would cost the executor's start-up per bucket, which
-- is most of a small decision's cost.)
--
--   keys    the distinct buckets, sorted;
--   now_us  the time in microseconds, or NULL for clock_timestamp() (tests inject time);
--   sizes   the number of checks of each decision;
--   idx     per check (flattened over decisions): its bucket, a 1-based index into keys;
--   t, tau  per check: µs per token (rounded up) and capacity × t;
--   cost    per check: tokens to take (0 peeks).
--
-- Returns { now, the tat of each key before the call, then after it }: the caller replays
-- the decisions with the pure functions to report them, and checks that it reaches the same
-- state.
-- Ids of settlements done at most once (reservations committed), until they expire; expired
-- ids are deleted by the cleanup.
CREATE @unlogged@ TABLE IF NOT EXISTS "@schema@"."@table@_once" (
    id bytea PRIMARY KEY,
    expires bigint NOT NULL
);

CREATE OR REPLACE FUNCTION "@schema@"."@table@_decide"(
    keys bytea[], now_us bigint, sizes int[], idx int[], t bigint[], tau bigint[], cost bigint[]
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    at_us bigint;
    old bigint[];
    cur bigint[];
    first int := 1;
    all_ok boolean;
BEGIN
    -- One upsert locks every row in key order; a missing one is inserted full (tat 0). (The
    -- no-op update writes a row version; locking with SELECT ... FOR UPDATE after an INSERT
    -- ... DO NOTHING would not, but a row the cleanup deleted in between would go unlocked.)
    WITH locked AS (
        INSERT INTO "@schema@"."@table@" AS b (key, tat)
        SELECT k, 0 FROM unnest(keys) AS k ORDER BY k
        ON CONFLICT (key) DO UPDATE SET tat = b.tat
        RETURNING b.key, b.tat
    )
    SELECT coalesce(array_agg(locked.tat ORDER BY u.i), '{}') INTO old
    FROM unnest(keys) WITH ORDINALITY AS u(k, i) JOIN locked ON locked.key = u.k;
    -- The clock is read once the rows are locked: read before, a call that waited for a lock
    -- would decide at a time earlier than the call it waited for, and could deny a token that
    -- call's time had already made.
    at_us := coalesce(now_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    cur := old;
    FOR d IN 1 .. coalesce(array_length(sizes, 1), 0) LOOP
        all_ok := true;
        FOR j IN first .. first + sizes[d] - 1 LOOP
            IF cost[j] > 0 AND greatest(cur[idx[j]], at_us) + cost[j] * t[j] - at_us > tau[j] THEN
                all_ok := false;
            END IF;
        END LOOP;
        IF all_ok THEN
            FOR j IN first .. first + sizes[d] - 1 LOOP
                IF cost[j] > 0 THEN
                    cur[idx[j]] := greatest(cur[idx[j]], at_us) + cost[j] * t[j];
                END IF;
            END LOOP;
        END IF;
        first := first + sizes[d];
    END LOOP;
    UPDATE "@schema@"."@table@" AS b SET tat = c.tat
    FROM unnest(keys, cur, old) AS c(key, tat, was)
    WHERE b.key = c.key AND c.tat <> c.was;
    RETURN array_prepend(at_us, old || cur);
END
$$;
