-- The baseline: the token-bucket table and PL/pgSQL function of a widely read PostgreSQL /
-- YugabyteDB write-up (see /work/shared/BASELINES.md), copied as published, flaws included.
-- The only change is that both live in the run's own schema, `@schema@` (filled in by
-- database.rs with a checked lowercase name), so that a run never touches anything else.
--
-- Table: one row per user.
--   id  the key;  tk  the tokens left, a bigint;  ts  the time of the last call.
--
-- Function `rate_limiting_token_bucket_request(rate_id, refill_per_sec, window_seconds)`:
-- one call per request, in its own transaction (autocommit), under the session's isolation.
--   rate_id          the key
--   refill_per_sec   tokens per second (int, default 2)
--   window_seconds   the bucket holds window_seconds × refill_per_sec tokens (int, default 60)
-- Returns the tokens left after taking one, or -1: no token (the request is refused).
--
-- The flaws the benchmark shows, kept on purpose:
--   * a key's first calls race: each UPDATE finds no row, each then INSERTs, and all but one
--     fail with a duplicate key (SQLSTATE 23505) — the write-up runs it SERIALIZABLE and tells
--     the application to retry 40001, which this is not;
--   * tk is a bigint: every call rounds `tk - 1 + refill` to a whole token and sets ts to now,
--     throwing the fraction away, so the bucket refills too slowly (or too fast) depending on
--     how often it is called; a refused call also writes (tk = -1, ts = now).
CREATE TABLE "@schema@".rate_limiting_token_bucket (
    id text PRIMARY KEY,
    tk bigint NOT NULL,
    ts timestamptz NOT NULL
);

CREATE OR REPLACE FUNCTION "@schema@".rate_limiting_token_bucket_request
    (rate_id text, refill_per_sec int DEFAULT 2, window_seconds int DEFAULT 60)
RETURNS int AS $$
DECLARE
    new_tk int := NULL; -- the tokens left, or NULL when the key has no row yet
BEGIN
    -- Take one token and add the ones refilled since the last call, between -1 (no debt)
    -- and the bucket's capacity.
    UPDATE "@schema@".rate_limiting_token_bucket
    SET ts = now(),
        tk = greatest(
                 least(tk - 1 + refill_per_sec * extract(epoch FROM clock_timestamp() - ts),
                       window_seconds * refill_per_sec),
                 -1)
    WHERE id = rate_id
    RETURNING tk INTO new_tk;
    -- A new key starts with a full bucket, less the token of this call.
    IF new_tk IS NULL THEN
        INSERT INTO "@schema@".rate_limiting_token_bucket (id, tk, ts)
        VALUES (rate_id, window_seconds * refill_per_sec - 1, clock_timestamp())
        RETURNING tk INTO new_tk;
    END IF;
    RETURN new_tk;
END;
$$ LANGUAGE plpgsql;
