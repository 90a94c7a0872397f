-- tollgate's token-bucket script: the hot path of decide.lua, for calls whose checks are all
-- token buckets. A port of gcra.rs reduced to what only Redis can do: read every bucket once,
-- decide in order, write what changed. It answers with the states it read and one flag per
-- decision; the client replays the same decisions with gcra.rs itself to get remaining, retry
-- and reset, and refuses the reply if its replay disagrees with a flag. So Redis spends its
-- time on nothing the client could do, and there is one implementation of the answers.
--
-- KEYS[i]  token buckets, `tollgate:v1:{<escaped user key>}:tb:...` (see keys.rs); the value is
--          the theoretical arrival time in microseconds of Redis's clock; TTL: until the
--          bucket is full again. A missing or unreadable value is a key never seen.
-- ARGV[1]  "" to read Redis's clock (TIME), or a time in microseconds (tests inject time).
-- ARGV[2..] the decisions in order: M, its number of checks, then for each check 4 numbers:
--          key index (into KEYS), emission interval t (µs per token, rounded up), tolerance
--          tau (= capacity × t), cost. A decision is all or nothing; cost 0 peeks.
--
-- Returns { now, the state read of each key (0 when absent), then per decision 1 when it was
-- allowed and taken, else 0 }.
--
-- Integers only: Lua numbers are doubles, exact below 2^53; the caller refuses tau >= 2^52, and
-- now ≈ 1.8e15 µs, so tat + cost × t <= now + 2 tau stays exact this century.

local now
-- With an injected time, Redis's own clock (which expires keys) does not follow the test's, so
-- TTLs get a minute of slack; TTLs only free memory, they never decide.
local slack = 0
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
  slack = 60000
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end

local tonumber, max = tonumber, math.max
local out = { now }
local tat, dirty = {}, {}
-- One MGET for every bucket: each redis.call costs Redis more than the read itself.
local values = redis.call('MGET', unpack(KEYS))
for k = 1, #KEYS do
  local v = tonumber(values[k] or '0') or 0
  tat[k] = v
  out[k + 1] = v
end

local a, n = 2, #ARGV
while a <= n do
  local m = tonumber(ARGV[a])
  local first = a + 1
  a = first + 4 * m
  -- First pass: does every check pass?
  local all = true
  for i = first, a - 1, 4 do
    local k, t, tau, cost = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]),
      tonumber(ARGV[i + 3])
    if cost > 0 and max(tat[k], now) + cost * t - now > tau then
      all = false
      break
    end
  end
  -- Second pass: take. A decision never names one bucket twice, so each check sees the state
  -- its first pass saw.
  if all then
    for i = first, a - 1, 4 do
      local k, t, cost = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 3])
      if cost > 0 then
        tat[k] = max(tat[k], now) + cost * t
        dirty[k] = true
      end
    end
  end
  out[#out + 1] = all and 1 or 0
end

for k in pairs(dirty) do
  local ttl = math.ceil((tat[k] - now) / 1000) + slack
  redis.call('SET', KEYS[k], string.format('%d', tat[k]), 'PX', string.format('%d', ttl))
end
return out
