-- tollgate token bucket (GCRA), a port of crates/tollgate/src/algorithm/gcra.rs.
--
-- Decides a list of decisions in order, each one all-or-nothing over its checks, with the state
-- of every key carried from one decision to the next (so a batch of coalesced checks on one hot
-- key is decided in arrival order, as if they had come one by one).
--
-- KEYS[i]   the buckets, `tollgate:v1:{<escaped user key>}:tb:<capacity>:<refill>:<period_ns>`;
--           the hash tag is the user key, so every policy of one key lives in one cluster slot.
--           Value: the theoretical arrival time (tat) in microseconds of Redis's clock, as a
--           decimal string; TTL: until the bucket is full again (an expired key is a full bucket).
-- ARGV[1]   "" to read Redis's clock (TIME), or a time in microseconds (tests inject time).
-- ARGV[2]   the number of decisions D; then for each decision: M, its number of checks, then for
--           each check 4 numbers: key index (into KEYS), emission interval t (µs per token,
--           rounded up), tolerance tau (= capacity × t), cost.
--
-- Returns { now, then for each decision: allowed (0/1), then for each of its checks:
--           allowed (0/1), remaining, retry_after (µs), reset_after (µs) }.
--
-- Integers only: every value stays below 2^53 (now ≈ 1.8e15 µs, tau <= 2^62 ns ≈ 4.6e15 µs),
-- where Lua's doubles are exact, and floor() of a quotient of two such integers is exact.

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end

local tat = {}
local dirty = {}
for i = 1, #KEYS do
  tat[i] = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
end

local out = { now }
local a = 3
for _ = 1, tonumber(ARGV[2]) do
  local m = tonumber(ARGV[a])
  a = a + 1
  local checks = {}
  local all = true
  for c = 1, m do
    local k, t, tau, cost = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    a = a + 4
    local base = math.max(tat[k], now)
    local new = base + cost * t
    local allowed = cost == 0 or new - now <= tau
    all = all and allowed
    checks[c] = { k, t, tau, cost, base, new, allowed }
  end
  out[#out + 1] = all and 1 or 0
  for c = 1, m do
    local k, t, tau, cost, base, new, allowed = unpack(checks[c])
    local held = base
    if all then
      held = new
      if cost > 0 then
        tat[k] = new
        dirty[k] = true
      end
    end
    local backlog = held - now
    local remaining = math.max(0, math.floor((tau - backlog) / t))
    local retry = 0
    if not allowed then
      retry = new - tau - now
    end
    out[#out + 1] = allowed and 1 or 0
    out[#out + 1] = remaining
    out[#out + 1] = retry
    out[#out + 1] = backlog
  end
end

for k in pairs(dirty) do
  local ttl_ms = math.ceil((tat[k] - now) / 1000)
  redis.call('SET', KEYS[k], string.format('%d', tat[k]), 'PX', string.format('%d', ttl_ms))
end
return out
