-- tollgate's settlement script: refunds and charges of token buckets outside a decision (a
-- reservation committed), a port of Gcra::refund and Gcra::charge in algorithm/gcra.rs, all in
-- one atomic run, at most once per id.
--
-- KEYS[1..n] token buckets, `tollgate:v3:{<escaped user key>}:tb:...` (keys.rs; the value is
--            "<tat> <t> <tau>", the theoretical arrival time in µs of Redis's clock and the
--            numbers it was written under, rebased to this call's first (rebase.lua); TTL
--            until full again);
-- KEYS[n+1]  with a once-id only: `tollgate:v3:{<escaped user key>}:once:<hex id>`, in the
--            slot of the buckets; it holds "1" for the id's TTL.
-- ARGV[1]    "" to read Redis's clock (TIME), or a time in µs (tests inject time).
-- ARGV[2]    "" without a once-id, else its TTL in ms.
-- ARGV[3..]  per bucket, 4 numbers: t (µs per token), tau (capacity × t), 0 to refund or 1 to
--            charge, and the amount (the caller caps amount × t at 2^52, which changes no
--            answer: it already covers any backlog and reaches the debt cap).
--
-- Returns { now, the tat of each bucket afterwards }, or { -1 } when the once-id was settled
-- before, or { -2, k } when bucket k holds a value this version never writes (not three whole
-- numbers, more than 2^52 µs past now, a key of another type): then nothing changed but the
-- garbage key's TTL, cut to the longest a bucket of its policy lives (2 tau) so that it goes
-- away like one, and the once-id is not recorded.
--
-- Integers only, below 2^53: now ≈ 1.8e15 µs, tat <= now + 2^52, a charge capped at
-- now + min(2 tau, 2^51): a bucket is never put more than one capacity into debt in total.

local now
local slack = 0
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
  slack = 60000
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
-- Past 2^52 µs (2112), now + tau would leave the doubles' exact range: refused (script.rs).
if now > 4503599627370495 then
  return redis.error_reply('tollgate: the clock reads ' .. string.format('%d', now)
    .. ' µs since the UNIX epoch, past 2^52 µs (2112), the latest time it decides at')
end

local max, min = math.max, math.min
local n = #KEYS
if ARGV[2] ~= '' then
  n = n - 1
end

local tats = {}
for k = 1, n do
  local v = redis.pcall('GET', KEYS[k])
  local tat = 0
  if type(v) == 'table' then
    tat = nil
  elseif v then
    local a, b, c = string.match(v, '^(%d+) (%d+) (%d+)$')
    local t, tau = tonumber(b), tonumber(c)
    tat = tonumber(a)
    if tat and (tat > now + 4503599627370496 or t == 0 or t >= 4503599627370496
        or tau >= 4503599627370496) then
      tat = nil
    elseif tat then
      -- Under the numbers of this settlement (rebase.lua).
      local base = 3 + (k - 1) * 4
      tat = rebase(now, tat, t, tau, tonumber(ARGV[base]), tonumber(ARGV[base + 1]))
    end
  end
  if not tat then
    local most = math.ceil(2 * tonumber(ARGV[3 + (k - 1) * 4 + 1]) / 1000) + slack
    local left = redis.call('PTTL', KEYS[k])
    if left < 0 or left > most then
      redis.call('PEXPIRE', KEYS[k], string.format('%d', most))
    end
    return { -2, k }
  end
  tats[k] = tat
end

if ARGV[2] ~= '' and not redis.call('SET', KEYS[#KEYS], '1', 'NX', 'PX', ARGV[2]) then
  return { -1 }
end

local max_debt = 2251799813685248 -- 2^51 µs
local out = { now }
for k = 1, n do
  local a = 3 + (k - 1) * 4
  local t, charge, amount = tonumber(ARGV[a]), ARGV[a + 2] == '1', tonumber(ARGV[a + 3])
  local tat = tats[k]
  if charge then
    -- At most one capacity of debt (tat <= now + 2 tau), and 2^51 µs; never lowered.
    local base = max(tat, now)
    tat = max(base, min(base + amount * t, now + min(2 * tonumber(ARGV[a + 1]), max_debt)))
  elseif tat > now then
    tat = max(tat - amount * t, now)
  end
  out[k + 1] = tat
  if tat > now then
    redis.call('SET', KEYS[k], string.format('%d %d %d', tat, t, tonumber(ARGV[a + 1])), 'PX',
      string.format('%d', math.ceil((tat - now) / 1000) + slack))
  else
    redis.call('DEL', KEYS[k])
  end
end
return out
