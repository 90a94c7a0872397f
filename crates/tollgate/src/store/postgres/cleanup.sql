-- Deletes up to $2 idle buckets: rows whose tat has passed are full, the same as no row (and
-- rows whose tat this version never writes, more than 2^52 µs past now: see call.rs). Only
-- rows full for a minute go: a busy bucket of a fast policy is full again microseconds after
-- each call, and deleting it would only make the next call insert it again.
-- Rows locked by a decision in progress are skipped, never waited for; the outer condition is
-- checked again on the row as it is when deleted.
--
--   $1 now in µs, or NULL for clock_timestamp()   $2 the most rows to delete
DELETE FROM "@schema@"."@table@"
WHERE key IN (
    SELECT key FROM "@schema@"."@table@"
    WHERE tat <= coalesce($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) - 60000000
       OR tat > coalesce($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) + 4503599627370496
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
AND (tat <= coalesce($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) - 60000000
     OR tat > coalesce($1::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) + 4503599627370496)
