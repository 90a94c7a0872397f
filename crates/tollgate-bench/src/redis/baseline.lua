-- Baseline 1 of the published Redis token-bucket benchmark: a Lua script per request.
-- Not tollgate's algorithm: floats, the client's clock, a hash per key. Kept faithful on purpose.
--
-- KEYS[1]  the bucket, a hash with fields `tokens` (a float) and `ts` (milliseconds).
-- ARGV     now_ms (the client's clock), rate (tokens/s), burst, cost, ttl_ms.
-- Returns  { allowed (0/1), retry_after_ms }.
local now = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end

local delta = math.max(0, now - ts)
tokens = math.min(burst, tokens + delta / 1000 * rate)
-- The publication's fix: a client whose clock reads earlier than the stored ts must not move
-- ts back, or the next call refills the same interval twice.
ts = math.max(now, ts)

local allowed = 0
local retry_after_ms = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  retry_after_ms = math.ceil((cost - tokens) / rate * 1000)
end

-- Always written back, allowed or not, as published.
redis.call('HMSET', KEYS[1], 'tokens', tokens, 'ts', ts)
redis.call('PEXPIRE', KEYS[1], ttl)
return { allowed, retry_after_ms }
