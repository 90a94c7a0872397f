-- A batch of single checks on distinct token buckets, each cost >= 1: decide_one.sql for many
-- rows in one statement. The decisions are independent (no bucket twice), so the order among
-- them does not matter; the rows are locked in key order, so concurrent batches never deadlock.
-- A call of the PL/pgSQL decide function would cost the server about three such statements.
--
--   $1 keys (bytea[])   $2 costs   $3 t, µs per token (rounded up)   $4 tau = capacity × t
--   $5 now in µs, or NULL for clock_timestamp() (tests inject time)
--
-- A new key is inserted with the cost taken (always allowed: the caller refuses cost >
-- capacity); an existing one is updated only when the cost fits, or rebased when its row has
-- other numbers (see decide_one.sql). The proposed row carries now + cost × t, so
-- `excluded.tat - now` is the check's cost × t, and the check's t and tau.
--
-- Returns one row per key, in the order given: now; the tat after taking, or NULL when denied;
-- and, when denied only, the tat this statement's snapshot saw, rebased (see decide_one.sql).
WITH clock AS (
    SELECT coalesce($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) AS now
), input AS (
    SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::bigint[])
        WITH ORDINALITY AS i(key, cost, t, tau, n)
), taken AS (
    INSERT INTO "@schema@"."@table@" AS b (key, tat, t, tau)
    SELECT input.key, clock.now + input.cost * input.t, input.t, input.tau
    FROM input, clock ORDER BY input.key
    ON CONFLICT (key) DO UPDATE
        SET tat = greatest("@schema@"."@table@_rebase"(b.tat, b.t, b.tau, excluded.t,
                excluded.tau, (SELECT now FROM clock)), (SELECT now FROM clock))
            + (excluded.tat - (SELECT now FROM clock)),
            t = excluded.t, tau = excluded.tau
        -- A tat this version never writes is never decided on (see decide_one.sql).
        WHERE CASE WHEN b.tat < 0 OR b.tat > (SELECT now FROM clock) + 4503599627370496 THEN false
            ELSE greatest("@schema@"."@table@_rebase"(b.tat, b.t, b.tau, excluded.t,
                    excluded.tau, (SELECT now FROM clock)), (SELECT now FROM clock))
                + (excluded.tat - (SELECT now FROM clock))
                - (SELECT now FROM clock)
                <= excluded.tau END
    RETURNING b.key, b.tat
), moved AS (
    -- Denied under other numbers than its row's: rebased all the same (see decide_one.sql).
    UPDATE "@schema@"."@table@" AS b
    SET tat = "@schema@"."@table@_rebase"(b.tat, b.t, b.tau, input.t, input.tau, clock.now),
        t = input.t, tau = input.tau
    FROM input, clock
    WHERE b.key = input.key AND NOT EXISTS (SELECT FROM taken WHERE taken.key = input.key)
      AND b.tat > clock.now AND b.tat <= clock.now + 4503599627370496
      AND (b.t <> input.t OR b.tau <> input.tau)
    RETURNING b.key, b.tat
)
SELECT clock.now,
       taken.tat,
       CASE WHEN taken.key IS NULL
            THEN coalesce(moved.tat,
                (SELECT "@schema@"."@table@_rebase"(b.tat, b.t, b.tau, input.t, input.tau,
                    clock.now)
                 FROM "@schema@"."@table@" AS b WHERE b.key = input.key)) END
FROM input CROSS JOIN clock LEFT JOIN taken ON taken.key = input.key
    LEFT JOIN moved ON moved.key = input.key
ORDER BY input.n
