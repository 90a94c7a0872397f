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
--   t, tau  the emission interval and tolerance (µs) the tat was written under: decided under
--        other numbers (a named policy changed), the bucket is rebased first (`<table>_rebase`:
--        its level kept, capped at the new capacity) and written so even when nothing is
--        taken. 0 in a row written before layout v3: read as the numbers of the check.
--
-- The table may be UNLOGGED: rate-limit state is ephemeral, and an unlogged table skips the
-- write-ahead log. After a crash PostgreSQL empties it (every bucket is full again), and
-- replicas do not have it.

CREATE SCHEMA IF NOT EXISTS "@schema@";

CREATE @unlogged@ TABLE IF NOT EXISTS "@schema@"."@table@" (
    key bytea PRIMARY KEY,
    tat bigint NOT NULL
);
-- Layout v3: the numbers beside the tat (a v2 table gains them, 0 in its rows).
ALTER TABLE "@schema@"."@table@" ADD COLUMN IF NOT EXISTS t bigint NOT NULL DEFAULT 0;
ALTER TABLE "@schema@"."@table@" ADD COLUMN IF NOT EXISTS tau bigint NOT NULL DEFAULT 0;

-- A token bucket's tat under new numbers (tp, taup) at now: a port of Gcra::rebase_in
-- (algorithm/gcra.rs) in µs, as rebase.lua is for Redis. Its level at now (negative in debt),
-- in units of 1/t token, becomes units of 1/tp token rounded down (a fraction of a token is
-- never rounded into one); the new tat is now + clamp(taup - that, 0, what a bucket of the
-- new numbers can owe). Full (tat <= now), garbage (more than 2^52 µs past now: reported by
-- the caller, never decided on), unchanged numbers, or numbers unknown (t = 0): as it is. In
-- numeric: exact whatever the numbers.
CREATE OR REPLACE FUNCTION "@schema@"."@table@_rebase"(
    tat bigint, t bigint, tau bigint, tp bigint, taup bigint, now bigint
) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN tat <= now OR tat > now + 4503599627370496 OR t <= 0 OR (t = tp AND tau = taup)
            THEN tat
        ELSE now + least(greatest(taup
            - (div((tau - (tat - now))::numeric * tp, t)
               - CASE WHEN mod((tau - (tat - now))::numeric * tp, t) < 0 THEN 1 ELSE 0 END),
            0), greatest(taup, least(2 * taup, 2251799813685248)))::bigint
    END
$$;

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
-- A bucket whose row has other numbers than the check naming it is rebased to the check's
-- first (and again if a later check of the call names it under others), and written so.
--
-- Returns { now, the tat of each key before the call (rebased to the numbers of the first
-- check naming it), then after it }: the caller replays the decisions with the pure functions
-- to report them, and checks that it reaches the same state.
-- The layout's version, which every server checks in its readiness probe: servers of two
-- layouts would keep separate buckets on one database, so they must not run side by side
-- unnoticed. `tollgate migrate` (and the first use by a new version) sets it.
COMMENT ON TABLE "@schema@"."@table@" IS 'tollgate layout v3';

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
    raw bigint[];
    ot bigint[];
    otau bigint[];
    old bigint[];
    cur bigint[];
    ct bigint[];
    ctau bigint[];
    slot int;
    seen boolean[];
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
        RETURNING b.key, b.tat, b.t, b.tau
    )
    SELECT coalesce(array_agg(locked.tat ORDER BY u.i), '{}'),
           coalesce(array_agg(locked.t ORDER BY u.i), '{}'),
           coalesce(array_agg(locked.tau ORDER BY u.i), '{}')
    INTO raw, ot, otau
    FROM unnest(keys) WITH ORDINALITY AS u(k, i) JOIN locked ON locked.key = u.k;
    -- The clock is read once the rows are locked: read before, a call that waited for a lock
    -- would decide at a time earlier than the call it waited for, and could deny a token that
    -- call's time had already made.
    at_us := coalesce(now_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    -- Each bucket under the numbers of the first check naming it (a garbage tat as it is).
    old := raw;
    ct := ot;
    ctau := otau;
    seen := array_fill(false, ARRAY[coalesce(array_length(keys, 1), 0)]);
    FOR j IN 1 .. coalesce(array_length(idx, 1), 0) LOOP
        slot := idx[j];
        IF NOT seen[slot] THEN
            seen[slot] := true;
            IF old[slot] >= 0 AND old[slot] <= at_us + 4503599627370496 THEN
                old[slot] := "@schema@"."@table@_rebase"(old[slot], ct[slot], ctau[slot], t[j], tau[j], at_us);
            END IF;
            ct[slot] := t[j];
            ctau[slot] := tau[j];
        END IF;
    END LOOP;
    cur := old;
    FOR d IN 1 .. coalesce(array_length(sizes, 1), 0) LOOP
        all_ok := true;
        FOR j IN first .. first + sizes[d] - 1 LOOP
            slot := idx[j];
            -- A tat this version never writes denies, and the caller reports it.
            IF cur[slot] < 0 OR cur[slot] > at_us + 4503599627370496 THEN
                all_ok := false;
            ELSE
                -- Under other numbers than the last check of this bucket's: rebased first.
                IF ct[slot] <> t[j] OR ctau[slot] <> tau[j] THEN
                    cur[slot] := "@schema@"."@table@_rebase"(cur[slot], ct[slot], ctau[slot], t[j], tau[j], at_us);
                    ct[slot] := t[j];
                    ctau[slot] := tau[j];
                END IF;
                IF cost[j] > 0 AND greatest(cur[slot], at_us) + cost[j] * t[j] - at_us > tau[j] THEN
                    all_ok := false;
                END IF;
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
    -- What was taken from, and what was rebased and is not full (a full bucket is full under
    -- any numbers).
    UPDATE "@schema@"."@table@" AS b SET tat = c.tat, t = c.t, tau = c.tau
    FROM unnest(keys, cur, raw, ct, ctau, ot, otau) AS c(key, tat, was, t, tau, wt, wtau)
    WHERE b.key = c.key
      AND (c.tat <> c.was OR ((c.t <> c.wt OR c.tau <> c.wtau) AND c.tat > at_us
           AND c.tat <= at_us + 4503599627370496));
    RETURN array_prepend(at_us, old || cur);
END
$$;

-- Window buckets: one row each, `key` as in the table above with the window's kind (`v2:fw:`,
-- `v2:sl:`, `v2:sc:`), `state` the algorithm's state in microseconds of the database's clock, and
-- `expires` the time from which the state no longer changes any decision (the cleanup deletes
-- the row a minute after). By kind:
--   fw  {window, count, width}: the window's index (now / width), the cost taken in it, and the
--       width counted with (fixed_window.rs);
--   sc  {window, previous, current, width}: as fw, with the window before (sliding_counter.rs);
--       after a change of width, while the counts of the old width still slide out, four more:
--       those counts, frozen, in the same form (a state of four carries none; widths never 0;
--       a state written before the form existed reads as it was, and an older tollgate, whose
--       replay does not know it, reports it incompatible: layout v3 still);
--   sl  {ts, cost, ts, cost, ...}: the grants still in the window, oldest first (sliding_log.rs).
CREATE @unlogged@ TABLE IF NOT EXISTS "@schema@"."@table@_windows" (
    key bytea PRIMARY KEY,
    state bigint[] NOT NULL,
    expires bigint NOT NULL
);

-- The whole count (rounded up) that a sliding counter's carried counts still charge at `now`
-- (sliding_counter.rs, `Carried::count`): counts `prev` and `cur` of window `win` of width
-- `wd` (0: none carried), weighed as that width's windows would weigh them. In numeric: exact.
CREATE OR REPLACE FUNCTION "@schema@"."@table@_carried"(
    win bigint, prev bigint, cur bigint, wd bigint, now bigint
) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN wd <= 0 THEN 0
        WHEN now / wd < win THEN prev + cur
        WHEN now / wd = win THEN
            div(prev::numeric * (wd - (now - now / wd * wd)) + cur::numeric * wd + wd - 1, wd)
        WHEN now / wd = win + 1 THEN div(cur::numeric * (wd - (now - now / wd * wd)) + wd - 1, wd)
        ELSE 0
    END::bigint
$$;

-- Decides one decision whose checks may be of any algorithm, all or nothing: a port of
-- algorithm::decide_all over gcra.rs, fixed_window.rs, sliding_counter.rs and sliding_log.rs,
-- computing whether each check passes and the state it leaves (not the answers: tollgate replays
-- the decision with the pure functions from the states returned, and checks it reaches the
-- states written). Rows are locked first, token buckets then windows, each in key order (every
-- caller locks in that one order, so concurrent calls never deadlock), and the clock is read
-- after the locks. Products are computed in numeric: exact whatever the numbers.
--
--   keys   the buckets (distinct), one per check;   kinds  0 token bucket, 1 fixed window,
--   2 sliding log, 3 sliding counter;   a, b  token bucket: t (µs per token) and tau; windows:
--   the width (µs) and the limit;   cost  per check (0 peeks);   now_us  NULL for
--   clock_timestamp().
--
-- Returns { now, allowed (0/1, or 2 when a state is garbage), then per check: the length of its
-- state before, that state, the length of its state after, that state } (a token bucket's state
-- is {tat}, rebased to the check's numbers when its row has others, and then written so). Garbage: a state this version never writes (another length, a NULL, a negative
-- number, a number more than 2^52 past now); nothing is then taken, and a garbage window's
-- `expires` is cut to the longest a window of its policy lives, so the cleanup deletes it as
-- it would the window (a garbage token bucket's tat is deleted by the cleanup).
CREATE OR REPLACE FUNCTION "@schema@"."@table@_decide_any"(
    keys bytea[], kinds int[], a bigint[], b bigint[], cost bigint[], now_us bigint
) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    n int := coalesce(array_length(keys, 1), 0);
    at bigint;
    locked bigint;
    st bigint[];
    tats bigint[] := '{}';
    states text[] := '{}';
    ok boolean[] := '{}';
    all_ok boolean := true;
    news text[] := '{}';
    ends bigint[] := '{}';
    answer bigint[];
    win bigint; cnt bigint; w0 bigint; prev bigint; cur bigint; idx bigint; e bigint;
    used bigint; newest bigint; w bigint; base bigint;
    -- A sliding counter's carried counts (sliding_counter.rs, `Carried`): window, previous,
    -- current, width (cwd 0: none), and their whole estimate at `at`, capped at the limit.
    cwin bigint; cprev bigint; ccur bigint; cwd bigint; k bigint; older bigint;
    new_state bigint[];
    bad boolean;
    spoilt boolean := false;
    rt bigint;
    rtau bigint;
    moved boolean[] := '{}';
BEGIN
    -- Lock token buckets, then windows, each in key order; a missing row is a new bucket.
    WITH l AS (
        INSERT INTO "@schema@"."@table@" AS t (key, tat)
        SELECT u.k, 0 FROM unnest(keys, kinds) AS u(k, kind) WHERE u.kind = 0 ORDER BY u.k
        ON CONFLICT (key) DO UPDATE SET tat = t.tat
        RETURNING 1
    ) SELECT count(*) INTO locked FROM l;
    WITH l AS (
        INSERT INTO "@schema@"."@table@_windows" AS x (key, state, expires)
        SELECT u.k, '{}', 0 FROM unnest(keys, kinds) AS u(k, kind) WHERE u.kind <> 0
        ORDER BY u.k
        ON CONFLICT (key) DO UPDATE SET state = x.state
        RETURNING 1
    ) SELECT count(*) INTO locked FROM l;
    at := coalesce(now_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    answer := ARRAY[at, 0];
    FOR j IN 1 .. n LOOP
        moved := moved || false;
        IF kinds[j] = 0 THEN
            SELECT ARRAY[t.tat], t.t, t.tau INTO st, rt, rtau
            FROM "@schema@"."@table@" AS t WHERE t.key = keys[j];
            -- Under other numbers: rebased (`<table>_rebase`), reported and written so.
            IF st[1] > at AND st[1] <= at + 4503599627370496 AND (rt <> a[j] OR rtau <> b[j]) THEN
                st := ARRAY["@schema@"."@table@_rebase"(st[1], rt, rtau, a[j], b[j], at)];
                moved[j] := true;
            END IF;
        ELSE
            SELECT x.state INTO st FROM "@schema@"."@table@_windows" AS x WHERE x.key = keys[j];
        END IF;
        st := coalesce(st, '{}');
        states := states || st::text;
        w := a[j];
        bad := CASE kinds[j]
            WHEN 0 THEN coalesce(array_length(st, 1), 0) NOT IN (0, 1)
            WHEN 1 THEN coalesce(array_length(st, 1), 0) NOT IN (0, 3)
            WHEN 3 THEN coalesce(array_length(st, 1), 0) NOT IN (0, 4, 8)
                OR (array_length(st, 1) = 8 AND (st[4] = 0 OR st[8] = 0))
            ELSE coalesce(array_length(st, 1), 0) % 2 <> 0 END
            OR EXISTS (SELECT FROM unnest(st) AS x WHERE x IS NULL OR x < 0
                       OR x > at + 4503599627370496);
        IF bad THEN
            spoilt := true;
            IF kinds[j] <> 0 THEN
                UPDATE "@schema@"."@table@_windows" AS x
                SET expires = least(x.expires, at + CASE WHEN kinds[j] = 3 THEN 2 * w ELSE w END)
                WHERE x.key = keys[j];
            END IF;
            ok := ok || false;
            news := news || '{}'::text;
            ends := ends || 0::bigint;
            all_ok := false;
            CONTINUE;
        END IF;
        IF kinds[j] = 0 THEN
            base := greatest(coalesce(st[1], 0), at);
            ok := ok || (cost[j] = 0 OR base + cost[j] * a[j] - at <= b[j]);
            new_state := ARRAY[base + cost[j] * a[j]];
            ends := ends || 0;
        ELSIF kinds[j] = 1 THEN
            win := coalesce(st[1], 0); cnt := coalesce(st[2], 0); w0 := coalesce(st[3], 0);
            -- A new width: a window that has not ended keeps its count, in its own width,
            -- until it ends (fixed_window.rs).
            IF w0 <> 0 AND w0 <> w THEN
                IF at < (win + 1) * w0 THEN
                    w := w0;
                ELSE
                    cnt := 0; win := at / w;
                END IF;
            END IF;
            IF win < at / w THEN win := at / a[j]; cnt := 0; w := a[j]; END IF;
            ok := ok || (cost[j] = 0 OR cnt + cost[j] <= b[j]);
            new_state := ARRAY[win, cnt + cost[j], w];
            ends := ends || ((win + 1) * w);
        ELSIF kinds[j] = 3 THEN
            win := coalesce(st[1], 0); prev := coalesce(st[2], 0); cur := coalesce(st[3], 0);
            w0 := coalesce(st[4], 0);
            cwin := coalesce(st[5], 0); cprev := coalesce(st[6], 0); ccur := coalesce(st[7], 0);
            cwd := coalesce(st[8], 0);
            -- A new width: its counts are carried, sliding out on their own schedule; counts
            -- carried from an earlier change become, as their estimate rounded up and capped at
            -- the limit, the count of the new current window.
            IF w0 <> 0 AND w0 <> w THEN
                older := least("@schema@"."@table@_carried"(cwin, cprev, ccur, cwd, at), b[j]);
                cwin := win; cprev := prev; ccur := cur; cwd := w0;
                win := at / w; prev := 0; cur := older;
            END IF;
            k := least("@schema@"."@table@_carried"(cwin, cprev, ccur, cwd, at), b[j]);
            IF k = 0 THEN
                cwin := 0; cprev := 0; ccur := 0; cwd := 0;
            END IF;
            idx := at / w;
            IF idx < win THEN
                e := 0;
            ELSE
                IF idx - win = 1 THEN prev := cur; cur := 0;
                ELSIF idx - win > 1 THEN prev := 0; cur := 0;
                END IF;
                win := idx; e := at - idx * w;
            END IF;
            ok := ok || (cost[j] = 0 OR k::numeric * w + prev::numeric * (w - e)
                + (cur + cost[j])::numeric * w <= b[j]::numeric * w);
            IF cwd = 0 THEN
                new_state := ARRAY[win, prev, cur + cost[j], w];
                ends := ends || ((win + 2) * w);
            ELSE
                new_state := ARRAY[win, prev, cur + cost[j], w, cwin, cprev, ccur, cwd];
                ends := ends || greatest((win + 2) * w,
                    CASE WHEN ccur > 0 THEN (cwin + 2) * cwd ELSE (cwin + 1) * cwd END);
            END IF;
        ELSE
            -- The log's grants still in the window (a prefix has left: it is sorted).
            used := 0;
            new_state := '{}';
            FOR i IN 1 .. coalesce(array_length(st, 1), 0) / 2 LOOP
                IF st[2 * i - 1] + w > at THEN
                    used := used + st[2 * i];
                    new_state := new_state || ARRAY[st[2 * i - 1], st[2 * i]];
                END IF;
            END LOOP;
            ok := ok || (cost[j] = 0 OR used + cost[j] <= b[j]);
            IF cost[j] > 0 THEN
                newest := coalesce(new_state[array_length(new_state, 1) - 1], at);
                new_state := new_state || ARRAY[greatest(newest, at), cost[j]];
            END IF;
            ends := ends || coalesce(new_state[array_length(new_state, 1) - 1] + w, 0);
        END IF;
        news := news || new_state::text;
        all_ok := all_ok AND ok[j];
    END LOOP;
    IF spoilt THEN
        answer[2] := 2;
    ELSIF all_ok THEN
        answer[2] := 1;
    END IF;
    FOR j IN 1 .. n LOOP
        st := states[j]::bigint[];
        answer := answer || coalesce(array_length(st, 1), 0)::bigint || st;
        IF all_ok AND cost[j] > 0 THEN
            new_state := news[j]::bigint[];
            IF kinds[j] = 0 THEN
                UPDATE "@schema@"."@table@" SET tat = new_state[1], t = a[j], tau = b[j]
                WHERE key = keys[j];
            ELSE
                UPDATE "@schema@"."@table@_windows" SET state = new_state, expires = ends[j]
                WHERE key = keys[j];
            END IF;
            answer := answer || coalesce(array_length(new_state, 1), 0)::bigint || new_state;
        ELSE
            IF moved[j] THEN
                UPDATE "@schema@"."@table@" SET tat = st[1], t = a[j], tau = b[j]
                WHERE key = keys[j];
            END IF;
            answer := answer || coalesce(array_length(st, 1), 0)::bigint || st;
        END IF;
    END LOOP;
    RETURN answer;
END
$$;
