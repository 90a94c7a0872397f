-- One check of one token bucket, cost >= 1: one statement, atomic at READ COMMITTED without
-- retries (the upsert locks the row, and re-reads it if another transaction changed it).
-- A port of algorithm/gcra.rs in integer microseconds of the database's clock.
--
--   $1 key (bytea)   $2 cost   $3 t, µs per token (rounded up)   $4 tau = capacity × t
--   $5 now in µs, or NULL for clock_timestamp() (tests inject time)
--
-- A new key is a full bucket: it is inserted with the cost taken (the caller refuses
-- cost > capacity, so that is always allowed). An existing one is updated only when the cost
-- fits: a denial writes nothing.
--
-- Returns one row: now; the tat after taking the cost, or NULL when denied; and, when denied
-- only, the tat this statement's snapshot saw, from which the denial is reported. If another
-- transaction took tokens between the snapshot and the row lock, that report is older than
-- the decision, which was made on the locked row.
WITH clock AS (
    SELECT coalesce($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) AS now
), taken AS (
    INSERT INTO "@schema@"."@table@" AS b (key, tat)
    SELECT $1::bytea, clock.now + $2::bigint * $3::bigint FROM clock
    ON CONFLICT (key) DO UPDATE
        SET tat = greatest(b.tat, (SELECT now FROM clock)) + $2::bigint * $3::bigint
        -- A tat this version never writes (negative, or more than 2^52 µs past now) is never
        -- decided on: reported (call.rs) and left for the cleanup to delete.
        WHERE CASE WHEN b.tat < 0 OR b.tat > (SELECT now FROM clock) + 4503599627370496 THEN false
            ELSE greatest(b.tat, (SELECT now FROM clock)) + $2::bigint * $3::bigint
                - (SELECT now FROM clock) <= $4::bigint END
    RETURNING b.tat
)
SELECT clock.now,
       (SELECT tat FROM taken),
       -- Read only when denied (an uncorrelated subquery runs when first needed).
       CASE WHEN NOT EXISTS (SELECT FROM taken)
            THEN (SELECT tat FROM "@schema@"."@table@" WHERE key = $1::bytea) END
FROM clock
