-- The floor of a batched decision script: every command a batch of decisions needs, and
-- nothing else. It reads the clock (TIME), reads every bucket of the batch (one MGET) and writes
-- each back with a TTL (one PSETEX a bucket, as tollgate's script writes), and decides nothing:
-- the reply is fixed (the time read). The same script as scripts/script-body's floor, but that
-- a bucket the cell has not written yet is written with ARGV[1] (Lua cannot pass a missing
-- value to PSETEX). What tollgate's script spends per decision beyond this is its own body's
-- work.
--
-- KEYS     the batch's buckets, one a decision, in arrival order (a hot key repeats).
-- ARGV[1]  the value a missing bucket is written with.
-- ARGV[2]  the TTL of every bucket written, in milliseconds.
-- Returns  the time read, in microseconds.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local got = redis.call('MGET', unpack(KEYS))
for k = 1, #KEYS do
  redis.call('PSETEX', KEYS[k], ARGV[2], got[k] or ARGV[1])
end
return now
