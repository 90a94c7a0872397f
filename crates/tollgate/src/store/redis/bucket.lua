-- tollgate's token-bucket script: the hot path of decide.lua, for calls whose checks are all
-- token buckets. A port of gcra.rs reduced to what only Redis can do: read every bucket once,
-- decide in order, write what changed. It answers with the values it read and the decisions
-- it did not take; the client replays the same decisions with gcra.rs itself to get remaining,
-- retry and reset, and refuses the reply if its replay disagrees. So Redis spends its time on
-- nothing the client could do, and there is one implementation of the answers.
--
-- Its prelude (script.rs) names the buckets `keys[b + 1]` to `keys[b + nkeys]`, and `last` the
-- index of ARGV[last] (S, below): the buckets are KEYS on one Redis (b = 0); per cluster node,
-- they are at the end of ARGV, where they are read without being copied.
--
-- keys     token buckets, `tollgate:v3:{<escaped user key>}:tb:...` (see keys.rs); the value is
--          "<tat> <t> <tau>": the theoretical arrival time in microseconds of Redis's clock,
--          and the emission interval and tolerance (µs) it was written under. A call under
--          other numbers (a named policy changed) rebases it first (rebase.lua), and writes
--          it so even when it takes nothing. TTL: until the bucket is full again. A missing
--          value (or one of another type, which MGET reads as missing and the first charge
--          overwrites) is a key never seen. A value this version never writes (not three whole
--          numbers, a tat more than 2^52 µs, 142 years, past now, t = 0, t or tau of 2^52) is
--          garbage: the decisions on it take nothing and are answered so (the client reports
--          them incompatible), the others go on, and the key is given the TTL of a bucket of its
--          policy at its emptiest (2 tau: a capacity in debt) unless it expires sooner, so it
--          goes away like any bucket.
-- ARGV[1]  "" to read Redis's clock (TIME), or a time in microseconds (tests inject time).
-- ARGV[2]  P, the number of distinct policies; then for each, 2 numbers: the emission interval
--          t (µs per token, rounded up) and the tolerance tau (= capacity × t).
-- ARGV[..] the decisions in order: M, its number of checks, then for each check 3 numbers: key
--          index (from 1), policy index, cost. A decision is all or nothing; cost 0 peeks.
--          The common decision, one check of cost 1 under policy 1, is one number instead:
--          -k, on bucket k; and r more such decisions that follow it, on buckets k + 1 to
--          k + r in order (a batch of users' checks), are -(k + r × 2^24) with it, or
--          -(k + r × 2^24 + 2^50) when all are on bucket k (a hot key's batch); k < 2^24 and
--          r < 2^26 (a bucket from 2^24 on goes in the long form, M = 1).
-- ARGV[last] S, and before it S strings "<took> <t> <tau>": what the only check of each of
--          buckets 1 to S takes (cost × t), and its policy's numbers; or -S and one string, when
--          they all take the same (a batch of checks alike, the common case). Those buckets
--          are *taken first*: written at once with `SET ... NX GET`, as if absent, which reads
--          and writes a new bucket (a user not seen for a while, the common case) in one
--          command instead of two; a bucket that exists is only read by it and decided as the
--          others. A bucket so created whose decision does not take (another bucket of it
--          denied) is deleted again, and so is every one when a later read fails (a key the
--          node does not serve): the call then wrote nothing.
-- (Every number is a string Redis hands to Lua, and Lua 5.1's tonumber runs strtod on it twice
-- (`+ 0` once): the encoding sends and converts each as few times as it can, and a bucket
-- written under a policy's numbers is read by its tat alone (`tails`, below). Every table,
-- closure and string the script makes costs Redis instructions, its garbage collection
-- included, which runs inside the calls: what a call needs rarely is made only when it does,
-- and a batch's alike values are converted and formatted once. docs/performance.md, "Redis",
-- has the counts.)
--
-- Returns { now (negated when this Redis cannot take first), then the value read of each key as
-- it was (nil when absent, -1 when garbage), then the decisions not taken, in order: d when the
-- d-th decision was denied, -d when it names a garbage key }: the client parses the values it
-- replays from, and a decision left out was taken.
--
-- Integers only: Lua numbers are doubles, exact below 2^53; the caller refuses tau >= 2^52, and
-- now ≈ 1.8e15 µs, so tat + cost × t <= now + 2 tau stays exact this century.

local now
-- With an injected time, Redis's own clock (which expires keys) does not follow the test's, so
-- TTLs get a minute of slack; TTLs only free memory, they never decide.
local slack = 0
if ARGV[1] ~= '' then
  now = ARGV[1] + 0
  slack = 60000
else
  local time = redis.call('TIME')
  now = time[1] * 1000000 + time[2]
end
-- Past 2^52 µs (2112), now + tau would leave the doubles' exact range: refused (script.rs).
if now > 4503599627370495 then
  return redis.error_reply('tollgate: the clock reads ' .. string.format('%d', now)
    .. ' µs since the UNIX epoch, past 2^52 µs (2112), the latest time it decides at')
end

local tonumber, max, ceil, floor, format = tonumber, math.max, math.ceil, math.floor, string.format
local type, sub, match = type, string.sub, string.match

-- The policies' numbers, and (`tails[p]`) each policy's as the tail of a bucket's value,
-- "<t> <tau>" (the client writes them in plain decimal, as this script writes a bucket), by
-- which (`tails[tail]` is p) a bucket written under one of them is recognised without
-- converting its numbers: Lua 5.1's tonumber runs strtod twice on a string, six times for a
-- bucket's three numbers (docs/performance.md counts them). An arithmetic coercion runs it
-- once.
local t, tau, tails = {}, {}, {}
local a = 3
for p = 1, ARGV[2] + 0 do
  local tail = ARGV[a] .. ' ' .. ARGV[a + 1]
  t[p], tau[p], tails[p], tails[tail] = ARGV[a] + 0, ARGV[a + 1] + 0, tail, p
  a = a + 2
end

local n = last
local first = ARGV[n] + 0
local alike = first < 0
if alike then
  first, n = -first, n - 2
else
  n = n - first - 1
end
-- The buckets taken first: what each `SET ... NX GET` read (false: absent, or of another
-- type), and the value each was created with.
local read_first, written = {}, {}
local function take_back(err)
  for k in pairs(written) do
    redis.call('DEL', keys[b + k])
  end
  return err
end
local prev, created, created_s, ttl_s, refused
for k = 1, first do
  local take = ARGV[alike and n + 1 or n + k]
  -- Checks alike (most of a batch) take alike: their arguments are formatted once.
  if take ~= prev then
    prev = take
    local took, numbers = match(take, '^(%d+) (%d+ %d+)$')
    took = took + 0
    created = now + took
    created_s, ttl_s = format('%d %s', created, numbers), format('%d', ceil(took / 1000) + slack)
  end
  local got = redis.pcall('SET', keys[b + k], created_s, 'NX', 'GET', 'PX', ttl_s)
  if got == false then
    -- Absent: decided from a full bucket, under its check's numbers.
    read_first[k], written[k] = false, created
  elseif type(got) == 'string' then
    read_first[k] = got
  else
    local err = type(got) == 'table' and got.err
    if err and sub(err, 1, 9) == 'WRONGTYPE' then
      -- Of another type: read as missing, as MGET reads it, and overwritten if charged.
      read_first[k] = false
    elseif err and sub(err, 1, 3) == 'OOM' then
      -- Over maxmemory, Redis refuses a script's writes until its first (so nothing was
      -- created before this one): the rest is read, and only what is charged fails, at its
      -- write.
      first = k - 1
      break
    elseif k == 1 and err and string.find(err, 'syntax error', 1, true) then
      -- Redis before 7.0 refuses NX with GET: every bucket is read below, and a negative time
      -- tells the client not to take first again. (A time injected at 0 would hide it: tests
      -- inject later times.)
      first, refused = 0, true
      break
    else
      return take_back(got)
    end
  end
end
local out = { refused and -now or now }
-- `read_rest` comes before this text (script.rs): one MGET for every other bucket, as each
-- redis.call costs Redis more than the read itself; batched per cluster node, an MGET per
-- bucket (one command may not span slots). Every bucket is read before it is decided.
local got, shift = read_rest(first + 1)
if got.err then
  return take_back(got)
end

-- Per bucket: `tat[k]`, its state as decided so far (-1: garbage), and `was[k]` as read: it
-- was taken from or rebased when the two differ (`moved[k]` marks a rebase); `tl[k]`, the
-- tail of the numbers it counts in while they are a policy's (false: other numbers, then in
-- `ut[k]` and `utau[k]`). An absent bucket is full, as under any numbers: under the first
-- policy's, so that the common call never rebases it (nor could it: its tat, 0, is past). The
-- tables only some calls need are made when one does.
local tat, was, tl = {}, {}, {}
local garbage, moved, ut, utau
local furthest = now + 4503599627370496 -- 2^52 µs
-- A value equal to the one before it (a batch of users last written by one call, all full) is
-- not parsed again: Lua's strings are interned, so the test compares two pointers. (`seen`, not
-- the prelude's `last`, which is an index of ARGV.)
local seen, v, t1, tau1, l = 0
for k = 1, nkeys do
  local raw
  if k > first then
    raw = got[k - shift]
  else
    raw = read_first[k]
  end
  if raw ~= seen then
    seen, v, t1, tau1, l = raw, 0, 0, 0, tails[1]
    if raw then
      -- The usual value: a policy's own numbers after the tat.
      local at = match(raw, '^(%d+) ')
      local p = at and tails[sub(raw, #at + 2)]
      if p then
        v, l = at + 0, tails[p]
      else
        local tat_s, t_s, tau_s = match(raw, '^(%d+) (%d+) (%d+)$')
        v, t1, tau1, l = tonumber(tat_s), tonumber(t_s), tonumber(tau_s), false
        if t1 == 0 or t1 and (t1 >= 4503599627370496 or tau1 >= 4503599627370496) then
          v = nil
        end
      end
      if not v or v > furthest then
        v, l = -1, nil
      end
    end
  end
  if v < 0 then
    garbage = garbage or {}
    garbage[k], out[1 + k] = 0, -1
  else
    out[1 + k] = raw
    if l == false then
      ut, utau = ut or {}, utau or {}
      ut[k], utau[k] = t1, tau1
    end
  end
  tat[k], was[k], tl[k] = v, v, l
end

-- Bucket k as a bucket of policy p, when it counts in other numbers: rebased, and from then on
-- in p's. (`rebase` is made by `rebaser`, script.rs, when a call first needs it.)
local rebase
local function under(k, p)
  local from, t1, tau1 = tl[k]
  if from then
    local q = tails[from]
    t1, tau1 = t[q], tau[q]
  else
    t1, tau1 = ut[k], utau[k]
  end
  local tp, taup = t[p], tau[p]
  if (t1 ~= tp or tau1 ~= taup) and tat[k] > now then
    moved, rebase = moved or {}, rebase or rebaser()
    tat[k], moved[k] = rebase(now, tat[k], t1, tau1, tp, taup), true
  end
  tl[k] = tails[p]
end

-- `d` counts the decisions, `o` the reply's numbers.
local d, o = 0, 1 + nkeys
-- The client's numbers are plain decimals: `+ 0` converts them, once each (see `tails`).
while a <= n do
  local m = ARGV[a] + 0
  if m < 0 or m == 1 then
    -- Decisions of one check. The short form: r + 1 of cost 1 under policy 1, sent as
    -- -(k + r × 2^24) when on buckets k to k + r in order, plus 2^50 when all on bucket k; the
    -- long form, one of any cost and policy (M = 1).
    local k, r, step, cost, p = 0, 0, 1, 1, 1
    if m < 0 then
      m = -m
      if m >= 1125899906842624 then
        m, step = m - 1125899906842624, 0
      end
      r = floor(m / 16777216)
      k = m - r * 16777216
      a = a + 1
    else
      k, p, cost = ARGV[a + 1] + 0, ARGV[a + 2] + 0, ARGV[a + 3] + 0
      a = a + 4
    end
    local tp, taup, tailp = t[p], tau[p], tails[p]
    if step == 0 and tat[k] >= 0 then
      -- A hot bucket's decisions (cost 1), its state kept in a local between them.
      if tl[k] ~= tailp then
        under(k, p)
      end
      local v = tat[k]
      for _ = 0, r do
        -- max(v, now) + tp, without a call.
        local new = (v > now and v or now) + tp
        d = d + 1
        if new - now <= taup then
          v = new
        else
          o = o + 1
          out[o] = d
        end
      end
      tat[k] = v
    else
      for i = 0, r do
        local k = k + i * step
        local v = tat[k]
        d = d + 1
        if v < 0 then
          -- A garbage key expires as a bucket of its policy would at its emptiest.
          garbage[k] = max(garbage[k], ceil(2 * taup / 1000) + slack)
          o = o + 1
          out[o] = -d
        else
          if tl[k] ~= tailp then
            under(k, p)
            v = tat[k]
          end
          -- A peek (cost 0) takes nothing and is never denied.
          if cost > 0 then
            local new = (v > now and v or now) + cost * tp
            if new - now <= taup then
              tat[k] = new
            else
              o = o + 1
              out[o] = d
            end
          end
        end
      end
    end
  else
    -- Several: take only if every one passes. A decision never names one bucket twice, so
    -- each check's new state depends on its own bucket alone.
    local ks, news, costs = {}, {}, {}
    local all, spoilt = true, false
    for i = 1, m do
      local k, p, cost = ARGV[a + 1] + 0, ARGV[a + 2] + 0, ARGV[a + 3] + 0
      a = a + 3
      local new = 0
      if tat[k] < 0 then
        garbage[k] = max(garbage[k], ceil(2 * tau[p] / 1000) + slack)
        all, spoilt = false, true
      else
        if tl[k] ~= tails[p] then
          under(k, p)
        end
        new = max(tat[k], now) + cost * t[p]
        if cost > 0 and new - now > tau[p] then
          all = false
        end
      end
      ks[i], news[i], costs[i] = k, new, cost
    end
    a = a + 1
    if all then
      for i = 1, m do
        if costs[i] > 0 then
          tat[ks[i]] = news[i]
        end
      end
    end
    d = d + 1
    if not all then
      o = o + 1
      out[o] = spoilt and -d or d
    end
  end
end

-- Each bucket taken from or rebased is written once, with `PSETEX` (one argument fewer than
-- `SET ... PX`); a value and a TTL are formatted once for a run of buckets left alike (a batch
-- of users whose buckets were full: now + t each).
local value, value_v, value_tl, ttl_s, ttl
local call = redis.call -- looked up once for the common write, not at every one
for k = 1, nkeys do
  local v = tat[k]
  if v ~= was[k] or moved and moved[k] then
    -- A bucket taken first was written with what its only check took.
    if v > now and v ~= written[k] then
      local tk = tl[k]
      if v ~= value_v or tk ~= value_tl then
        value_v, value_tl = v, tk
        value = format('%d %s', v, tk)
        local left = ceil((v - now) / 1000) + slack
        if left ~= ttl then
          ttl, ttl_s = left, format('%d', left)
        end
      end
      call('PSETEX', keys[b + k], ttl_s, value)
    elseif v <= now then
      -- Rebased to full: as a key never seen.
      redis.call('DEL', keys[b + k])
    end
  elseif written[k] then
    -- Created for a decision that did not take: absent again, as it was.
    redis.call('DEL', keys[b + k])
  elseif garbage and garbage[k] and garbage[k] > 0 then
    -- Left as it is for whoever wants to look, but never for longer than a bucket lives.
    local left = redis.call('PTTL', keys[b + k])
    if left < 0 or left > garbage[k] then
      redis.call('PEXPIRE', keys[b + k], format('%d', garbage[k]))
    end
  end
end
return out
