-- One check of one token bucket, cost >= 1: one statement, atomic at READ COMMITTED without
-- retries (the upsert locks the row, and re-reads it if another transaction changed it).
-- A port of algorithm/gcra.rs in integer microseconds of the database's clock.
--
--   $1 key (bytea)   $2 cost   $3 t, µs per token (rounded up)   $4 tau = capacity × t
--   $5 now in µs, or NULL for clock_timestamp() (tests inject time)
--
-- A new key is a full bucket: it is inserted with the cost taken (the caller refuses
-- cost > capacity, so that is always allowed). An existing one is updated only when the cost
-- fits: a denial writes nothing, but for a bucket whose row has other numbers, which is
-- rebased to these (`<table>_rebase`, schema.sql) and written so, to refill at this pace from
-- now on.
--
-- Returns one row: now; the tat after taking the cost, or NULL when denied; and, when denied
-- only, the tat this statement's snapshot saw (rebased to these numbers), from which the
-- denial is reported. If another
-- transaction took tokens between the snapshot and the row lock, that report is older than
-- the decision, which was made on the locked row.
WITH clock AS (
    SELECT coalesce($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) AS now
), taken AS (
    INSERT INTO "@schema@"."@table@" AS b (key, tat, t, tau)
    SELECT $1::bytea, clock.now + $2::bigint * $3::bigint, $3::bigint, $4::bigint FROM clock
    ON CONFLICT (key) DO UPDATE
        SET tat = greatest("@schema@"."@table@_rebase"(b.tat, b.t, b.tau, $3::bigint,
                $4::bigint, (SELECT now FROM clock)), (SELECT now FROM clock))
                + $2::bigint * $3::bigint,
            t = $3::bigint, tau = $4::bigint
        -- A tat this version never writes (negative, or more than 2^52 µs past now) is never
        -- decided on: reported (call.rs) and left for the cleanup to delete.
        WHERE CASE WHEN b.tat < 0 OR b.tat > (SELECT now FROM clock) + 4503599627370496 THEN false
            ELSE greatest("@schema@"."@table@_rebase"(b.tat, b.t, b.tau, $3::bigint, $4::bigint,
                    (SELECT now FROM clock)), (SELECT now FROM clock)) + $2::bigint * $3::bigint
                - (SELECT now FROM clock) <= $4::bigint END
    RETURNING b.tat
), moved AS (
    -- Denied under other numbers than its row's: rebased all the same. (The upsert above locked
    -- the row; a row another transaction changed since this statement's snapshot is read again.)
    UPDATE "@schema@"."@table@" AS b
    SET tat = "@schema@"."@table@_rebase"(b.tat, b.t, b.tau, $3::bigint, $4::bigint, clock.now),
        t = $3::bigint, tau = $4::bigint
    FROM clock
    WHERE b.key = $1::bytea AND NOT EXISTS (SELECT FROM taken)
      AND b.tat > clock.now AND b.tat <= clock.now + 4503599627370496
      AND (b.t <> $3::bigint OR b.tau <> $4::bigint)
    RETURNING b.tat
)
SELECT clock.now,
       (SELECT tat FROM taken),
       -- Read only when denied (an uncorrelated subquery runs when first needed).
       CASE WHEN NOT EXISTS (SELECT FROM taken)
            THEN coalesce((SELECT tat FROM moved),
                (SELECT "@schema@"."@table@_rebase"(b.tat, b.t, b.tau, $3::bigint, $4::bigint,
                    clock.now)
                 FROM "@schema@"."@table@" AS b WHERE b.key = $1::bytea)) END
FROM clock
