-- tollgate's decision script: a port of the pure functions in crates/tollgate/src/algorithm/
-- (gcra.rs, fixed_window.rs, sliding_log.rs, sliding_counter.rs), one branch per algorithm.
--
-- Decides a list of decisions in order, each one all-or-nothing over its checks (which may
-- mix algorithms), with the state of every key carried from one decision to the next (so a
-- batch of coalesced checks on one hot key is decided in arrival order, as if they had come
-- one by one). Denials and peeks (cost 0) never write.
--
-- KEYS[i]   the buckets, `tollgate:v3:{<escaped user key>}:<kind>:<name>` (keys.rs), named by
--           the policy's name or numbers, not by the numbers this call decides with: those
--           may change under a bucket and its state carries over. The hash tag is the user
--           key, so every policy of one key lives in one cluster slot.
--           By kind (every time in microseconds of Redis's clock; a missing key is a key never
--           seen, so every TTL runs until the state can no longer change a decision):
--   tb  string "<tat> <t> <tau>": the theoretical arrival time, and the emission interval and
--       tolerance it was written under: decided under other numbers, it is rebased first
--       (rebase.lua: its level kept, capped at the new capacity) and written so even when
--       nothing is taken. TTL: until the bucket is full again.
--   fw  string "<window> <count> <width>": the window's index (now / width), the cost taken in
--       it, and the width counted with. TTL: until the window ends.
--   sc  string "<window> <previous> <current> <width>": the current window's index, the cost
--       taken in the window before it and in it, and the width counted with; after a change of
--       width, while the counts of the old width still slide out, four more numbers: those
--       counts, frozen, in the same form ("<window> <previous> <current> <width>" of the old
--       width; a value of four numbers, as written before they existed, carries none). TTL:
--       until the end of the window after the current one, or of the carried counts' if later.
--   sl  list, oldest first, one element per granted request: "<ts>" for cost 1, "<ts>:<cost>"
--       above (one element per grant, not per token, so a log holds at most `limit` elements
--       and a grant of cost 100 costs one element). Elements need not be unique: a list keeps
--       arrival order, which is the log's order. TTL: until the newest entry leaves the window.
-- ARGV[1]   "" to read Redis's clock (TIME), or a time in microseconds (tests inject time).
-- ARGV[2]   the number of decisions D; then for each decision: M, its number of checks, then for
--           each check 5 numbers: key index (into KEYS), algorithm, a, b, cost, where
--             algorithm 0 token bucket:   a = emission interval t (µs per token, rounded up),
--                                         b = tolerance tau (= capacity × t);
--             algorithm 1 fixed window, 2 sliding log, 3 sliding counter:
--                                         a = window width (µs, rounded up), b = limit.
--
-- Returns { now, then for each decision: allowed (0/1, or 2 when it names a garbage key), then
--           for each of its checks: allowed (0/1; for a garbage key 2, or 3 when the key holds
--           another type), remaining, retry_after (µs), reset_after (µs), hold (µs) }.
-- Garbage: a value this version never writes (not the numbers above, a number of 2^52 or
-- more, a time more than 2^52 µs past now, a key of another type). A decision naming one
-- takes nothing (the client reports it incompatible) and the others go on; the key is given
-- the longest TTL a bucket of its policy has (2 tau, a window, two for a counter) unless it
-- expires sooner, so it goes away like any bucket.
-- `hold` is how long a denial stays exactly as answered (allowed, remaining, and retry and
-- reset counting down) if nobody else takes: what the caller's deny cache may repeat.
--
-- Integers only. Lua numbers are doubles, exact below 2^53; the caller refuses policies that
-- could leave that range (script.rs): tau < 2^52 and width < 2^52 µs; a fixed window's limit
-- < 2^52; a sliding counter's limit × width < 2^51, so that `previous × (width - elapsed) +
-- current × width` (each term <= limit × width once current + cost <= limit) and the hold's
-- `(remaining + 1) × width - room` stay below 2^53.
-- now ≈ 1.8e15 µs, so now + width and now + tau stay below 2^53 this century. floor() of a
-- quotient of two such integers is exact.

local now
-- Redis expires keys by its own clock; an injected time does not move with it (a test steps
-- through a window faster or slower than Redis's clock runs), so there TTLs get a minute of
-- slack lest a key vanish between two steps of the test. A key that outlives its state reads
-- as the key never seen anyway: TTLs only free memory, they never decide.
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

local floor, max, min = math.floor, math.max, math.min
local huge = 4503599627370496 -- 2^52

-- GET that reads a key of another type as garbage (3) instead of failing the whole run.
local function get(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then
    return nil, 3
  end
  return v
end

local function ceil_ms(us)
  return string.format('%d', math.ceil(us / 1000) + slack)
end

-- One table per algorithm: load(key) -> state; eval(state, a, b, cost) -> check;
-- answer(check, taken) -> remaining, retry, reset, hold; apply(check) mutates the state;
-- store(key, state) writes it back.

local token_bucket = {
  load = function(key)
    local v, bad = get(key)
    if bad then
      return { garbage = bad }
    end
    if not v then
      return { tat = 0 }
    end
    local a, b, c = string.match(v, '^(%d+) (%d+) (%d+)$')
    local tat, t, tau = tonumber(a), tonumber(b), tonumber(c)
    if not tat or tat > now + huge or t == 0 or t >= huge or tau >= huge then
      return { garbage = 2 }
    end
    return { tat = tat, t = t, tau = tau }
  end,
  -- The longest a bucket lives: from a capacity in debt to full.
  ttl = function(t, tau)
    return 2 * tau
  end,
  eval = function(s, t, tau, cost)
    -- Numbers changed under the bucket's name: its level carries over (rebase.lua), and the
    -- rebased state is written even if nothing is taken (`moved`).
    if s.t ~= t or s.tau ~= tau then
      if s.t and s.tat > now then
        s.tat, s.moved = rebase(now, s.tat, s.t, s.tau, t, tau), true
      end
      s.t, s.tau = t, tau
    end
    local base = max(s.tat, now)
    local new = base + cost * t
    return { s = s, t = t, tau = tau, cost = cost, base = base, new = new,
             allowed = cost == 0 or new - now <= tau }
  end,
  answer = function(c, taken)
    local backlog = (taken and c.new or c.base) - now
    local remaining = max(0, floor((c.tau - backlog) / c.t))
    -- The wait for the cost, or for one token when peeking (cost 0): zero when it fits.
    local retry = max(0, c.base + max(c.cost, 1) * c.t - c.tau - now)
    local hold = 0
    if not c.allowed then
      hold = retry
    end
    return remaining, retry, backlog, hold
  end,
  apply = function(c)
    c.s.tat = c.new
  end,
  store = function(key, s)
    if s.tat > now then
      redis.call('SET', key, string.format('%d %d %d', s.tat, s.t, s.tau), 'PX', ceil_ms(s.tat - now))
    else
      -- Rebased to full: as a key never seen.
      redis.call('DEL', key)
    end
  end,
}

-- Reads "<n> <n> ..." (n numbers, or m when given, each below 2^52) into numbers, n zeros
-- when the key is missing; anything else (a value not written by this version) is garbage:
-- nil and its code.
local function numbers(key, n, m)
  local v, bad = get(key)
  if bad then
    return nil, bad
  end
  local out = {}
  if not v then
    for i = 1, n do
      out[i] = 0
    end
    return out
  end
  if not string.match(v, '^%d+[ %d]*$') then
    return nil, 2
  end
  for d in string.gmatch(v, '[^ ]+') do
    local x = string.match(d, '^%d+$') and tonumber(d)
    if not x or x >= huge then
      return nil, 2
    end
    out[#out + 1] = x
  end
  if #out ~= n and #out ~= m then
    return nil, 2
  end
  return out
end

local fixed_window = {
  load = function(key)
    local v, bad = numbers(key, 3)
    if not v then
      return { garbage = bad }
    end
    return { window = v[1], count = v[2], width = v[3] }
  end,
  ttl = function(width, limit)
    return width
  end,
  -- eval reads the state and never writes it (a denial changes nothing, even when a later
  -- check of the same run takes from the bucket); apply writes what eval computed.
  eval = function(s, width, limit, cost)
    local window, count, w = s.window, s.count, width
    -- A new width: a window that has not ended keeps its count, in its own width, until it
    -- ends; an ended one is forgotten (fixed_window.rs).
    if s.width ~= 0 and s.width ~= width then
      if now < (window + 1) * s.width then
        w = s.width
      else
        window, count = floor(now / width), 0
      end
    end
    -- A clock that stepped back into an earlier window keeps counting the later one.
    if window < floor(now / w) then
      window, count, w = floor(now / width), 0, width
    end
    return { s = s, window = window, count = count, width = w, limit = limit, cost = cost,
             until_end = (window + 1) * w - now,
             allowed = cost == 0 or count + cost <= limit }
  end,
  answer = function(c, taken)
    local count = c.count
    if taken then
      count = count + c.cost
    end
    local retry, reset, hold = 0, 0, 0
    -- A peek (cost 0) is allowed, and says when a cost of 1 would be.
    if c.count + max(c.cost, 1) > c.limit then
      retry = c.until_end
    end
    if count > 0 then
      reset = c.until_end
    end
    -- Nobody else taking, the count stands until the window ends.
    if not c.allowed then
      hold = retry
    end
    return max(0, c.limit - count), retry, reset, hold
  end,
  apply = function(c)
    local s = c.s
    s.window, s.count, s.width, s.until_end = c.window, c.count + c.cost, c.width, c.until_end
  end,
  store = function(key, s)
    redis.call('SET', key, string.format('%d %d %d', s.window, s.count, s.width),
      'PX', ceil_ms(s.until_end))
  end,
}

-- Counts carried from an earlier width (sliding_counter.rs, `Carried`): their estimate at t
-- scaled by their width, as whole counts (rounded up), and when they have slid out. Each
-- product is below 2 × limit × width of the policy they were counted under, < 2^52.
local function carried_scaled(c, t)
  local cw = c.width
  local i = floor(t / cw)
  if i < c.window then
    return (c.previous + c.current) * cw
  elseif i == c.window then
    return c.previous * (cw - (t - i * cw)) + c.current * cw
  elseif i == c.window + 1 then
    return c.current * (cw - (t - i * cw))
  end
  return 0
end

local function carried_count(c, t)
  return math.ceil(carried_scaled(c, t) / c.width)
end

local function carried_end(c)
  if c.current > 0 then
    return (c.window + 2) * c.width
  elseif c.previous > 0 then
    return (c.window + 1) * c.width
  end
  return 0
end

local sliding_counter = {
  load = function(key)
    local v, bad = numbers(key, 4, 8)
    if not v then
      return { garbage = bad }
    end
    local s = { window = v[1], previous = v[2], current = v[3], width = v[4] }
    -- Eight numbers: the counts of an earlier width carried; both widths are never 0.
    if v[5] then
      if v[4] == 0 or v[8] == 0 then
        return { garbage = 2 }
      end
      s.carried = { window = v[5], previous = v[6], current = v[7], width = v[8] }
    end
    return s
  end,
  ttl = function(width, limit)
    return 2 * width
  end,
  eval = function(s, w, limit, cost)
    local window, previous, current, carried = s.window, s.previous, s.current, s.carried
    -- A new width: its counts are carried, sliding out on their own schedule; counts carried
    -- from an earlier change become, as their estimate at now rounded up and capped at the
    -- limit, the count of the new current window (sliding_counter.rs).
    if s.width ~= 0 and s.width ~= w then
      local older = 0
      if carried then
        older = min(carried_count(carried, now), limit)
      end
      carried = { window = window, previous = previous, current = current, width = s.width }
      window, previous, current = floor(now / w), 0, older
    end
    if carried and carried_scaled(carried, now) == 0 then
      carried = nil
    end
    local k = 0
    if carried then
      k = min(carried_count(carried, now), limit)
    end
    local index = floor(now / w)
    local e = 0
    -- index < window: the clock stepped back; weigh the previous window fully.
    local back = index < window
    if not back then
      if index - window == 1 then
        previous, current = current, 0
      elseif index - window > 1 then
        previous, current = 0, 0
      end
      window = index
      e = now - index * w
    end
    -- k + current + cost > limit fails whatever the weight; checking it first keeps the
    -- products below 2 × limit × width.
    local allowed = cost == 0 or (k + current + cost <= limit
      and k * w + previous * (w - e) + (current + cost) * w <= limit * w)
    return { s = s, w = w, limit = limit, cost = cost, e = e, back = back, allowed = allowed,
             window = window, previous = previous, current = current, carried = carried, k = k }
  end,
  answer = function(c, taken)
    local w, e, limit, previous, k, carried = c.w, c.e, c.limit, c.previous, c.k, c.carried
    local current = c.current
    if taken then
      current = current + c.cost
    end
    -- room may be negative (over the estimate): remaining is then 0.
    local room = limit * w - (k * w + previous * (w - e) + current * w)
    local remaining = max(0, floor(room / w))
    local reset = 0
    if current > 0 then
      reset = 2 * w - e
    elseif previous > 0 then
      reset = w - e
    end
    if carried then
      reset = max(reset, carried_end(carried) - now)
    end
    local retry, hold = 0, 0
    -- A peek (cost 0) is allowed, and says when a cost of 1 would be.
    local probe = max(c.cost, 1)
    local fits = k + c.current + probe <= limit
      and k * w + previous * (w - e) + (c.current + probe) * w <= limit * w
    if not fits then
      if carried then
        -- Both estimates only fall as time passes: the first µs with room, by bisection
        -- between now (none) and when both have slid out (room: probe <= limit).
        local cur = c.current
        local function fits_at(d)
          local x = e + d
          local counted = 0
          if x < w then
            counted = previous * (w - x) + cur * w
          elseif x < 2 * w then
            counted = cur * (2 * w - x)
          end
          return (min(carried_count(carried, now + d), limit) + probe) * w + counted <= limit * w
        end
        local no, yes = 0, max(2 * w - e, carried_end(carried) - now)
        while yes - no > 1 do
          local mid = no + floor((yes - no) / 2)
          if fits_at(mid) then
            yes = mid
          else
            no = mid
          end
        end
        retry = yes
      elseif c.current + probe <= limit then
        -- Within this window, once enough of `previous` has slid out:
        -- previous × (w - e') <= (limit - current - probe) × w; previous > 0 here.
        retry = w - min(floor((limit - c.current - probe) * w / previous), w) - e
      else
        -- In the next window, where `current` becomes `previous` (non-zero here).
        retry = w - e + w - min(floor((limit - probe) * w / c.current), w)
      end
    end
    if not c.allowed then
      -- The answer stands until remaining grows (room rises by `previous` per µs), the
      -- window ends (the state rolls over), or the retry time comes.
      hold = min(retry, w - e)
      if c.back or carried then
        -- Time stands still for the estimate until the clock is back in its window, while a
        -- cached answer would count down; carried counts fall by steps of their own: not
        -- worth caching.
        hold = 0
      elseif previous > 0 then
        hold = min(hold, math.ceil(((remaining + 1) * w - room) / previous))
      end
    end
    return remaining, retry, reset, hold
  end,
  apply = function(c)
    local s = c.s
    s.window, s.previous, s.current, s.width = c.window, c.previous, c.current + c.cost, c.w
    s.carried = c.carried
  end,
  store = function(key, s)
    local w, carried = s.width, s.carried
    local value = string.format('%d %d %d %d', s.window, s.previous, s.current, w)
    local ends = (s.window + 2) * w
    if carried then
      value = value .. string.format(' %d %d %d %d', carried.window, carried.previous,
        carried.current, carried.width)
      ends = max(ends, carried_end(carried))
    end
    redis.call('SET', key, value, 'PX', ceil_ms(ends - now))
  end,
}

local sliding_log = {
  load = function(key)
    local entries = {}
    local list = redis.pcall('LRANGE', key, 0, -1)
    if list.err then
      return { garbage = 3 }
    end
    for i, v in ipairs(list) do
      local ts, cost = string.match(v, '^(%d+):?(%d*)$')
      ts, cost = tonumber(ts), tonumber(cost) or 1
      if not ts or ts > now + huge or cost >= huge then
        return { garbage = 2 }
      end
      entries[i] = { ts, cost }
    end
    -- head: the first element not yet pruned; kept: the elements read from Redis.
    return { entries = entries, head = 1, kept = #entries }
  end,
  eval = function(s, w, limit, cost)
    local used, oldest, last = 0, nil, nil
    for i = s.head, #s.entries do
      local ts, c = s.entries[i][1], s.entries[i][2]
      if ts + w > now then
        used = used + c
        oldest = oldest or i
        last = i
      end
    end
    return { s = s, w = w, limit = limit, cost = cost, used = used, oldest = oldest,
             last = last, allowed = cost == 0 or used + cost <= limit }
  end,
  answer = function(c, taken)
    local s, w = c.s, c.w
    local used, reset_at = c.used, 0
    if c.last then
      reset_at = s.entries[c.last][1] + w
    end
    if taken and c.cost > 0 then
      used = used + c.cost
      reset_at = max(reset_at, now + w)
    end
    local retry, hold = 0, 0
    -- Wait until enough of the oldest entries have left the window (for one token when
    -- peeking). Waiting means used > 0, so `oldest` exists; a denial stands until it leaves.
    local need = c.used + max(c.cost, 1) - c.limit
    if need > 0 then
      for i = c.oldest, #s.entries do
        local ts, cost = s.entries[i][1], s.entries[i][2]
        if ts + w > now then
          retry = ts + w - now
          need = need - cost
          if need <= 0 then
            break
          end
        end
      end
      if c.oldest and not c.allowed then
        hold = s.entries[c.oldest][1] + w - now
      end
    end
    return max(0, c.limit - used), retry, max(0, reset_at - now), hold
  end,
  apply = function(c)
    local s, w = c.s, c.w
    while s.head <= #s.entries and s.entries[s.head][1] + w <= now do
      s.head = s.head + 1
    end
    -- After a clock step back, log at the newest time so the log stays sorted; the entry then
    -- counts a little longer, never shorter.
    local at = now
    if s.head <= #s.entries then
      at = max(at, s.entries[#s.entries][1])
    end
    s.entries[#s.entries + 1] = { at, c.cost }
    s.width = w
  end,
  store = function(key, s)
    -- Elements appended in this run are never pruned in it (they count until now + width),
    -- so pruning only ever drops a prefix of what was read.
    local pruned = s.head - 1
    if pruned >= s.kept then
      redis.call('DEL', key)
    elseif pruned > 0 then
      redis.call('LTRIM', key, pruned, -1)
    end
    local new = {}
    for i = s.kept + 1, #s.entries do
      local ts, cost = s.entries[i][1], s.entries[i][2]
      new[#new + 1] = cost == 1 and string.format('%d', ts) or string.format('%d:%d', ts, cost)
    end
    -- In slices of 4096: Lua's unpack gives at most about 8,000 values (LUAI_MAXCSTACK).
    for i = 1, #new, 4096 do
      redis.call('RPUSH', key, unpack(new, i, math.min(i + 4095, #new)))
    end
    redis.call('PEXPIRE', key, ceil_ms(s.entries[#s.entries][1] + s.width - now))
  end,
}

sliding_log.ttl = function(width, limit)
  return width
end

local algorithms = { [0] = token_bucket, fixed_window, sliding_log, sliding_counter }

-- Per key index: its algorithm and state, loaded on first use; dirty when taken from; for a
-- garbage key, the TTL (µs) it gets.
local kind, state, dirty, spoilt = {}, {}, {}, {}

local out = { now }
local a = 3
for _ = 1, tonumber(ARGV[2]) do
  local m = tonumber(ARGV[a])
  a = a + 1
  local checks = {}
  local all, garbage = true, false
  for i = 1, m do
    local k, alg = tonumber(ARGV[a]), algorithms[tonumber(ARGV[a + 1])]
    local pa, pb, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    a = a + 5
    if not state[k] then
      kind[k], state[k] = alg, alg.load(KEYS[k])
    end
    if state[k].garbage then
      spoilt[k] = max(spoilt[k] or 0, alg.ttl(pa, pb))
      all, garbage = false, true
      checks[i] = { k, nil }
    else
      local c = alg.eval(state[k], pa, pb, cost)
      if state[k].moved then
        dirty[k] = true
      end
      all = all and c.allowed
      checks[i] = { k, c }
    end
  end
  out[#out + 1] = garbage and 2 or all and 1 or 0
  for i = 1, m do
    local k, c = checks[i][1], checks[i][2]
    if c then
      local remaining, retry, reset, hold = kind[k].answer(c, all)
      if all and c.cost > 0 then
        kind[k].apply(c)
        dirty[k] = true
      end
      out[#out + 1] = c.allowed and 1 or 0
      out[#out + 1] = remaining
      out[#out + 1] = retry
      out[#out + 1] = reset
      out[#out + 1] = hold
    else
      out[#out + 1] = state[k].garbage
      for _ = 1, 4 do
        out[#out + 1] = 0
      end
    end
  end
end

for k in pairs(dirty) do
  kind[k].store(KEYS[k], state[k])
end
-- A garbage key is left as it is for whoever wants to look, but never for longer than a
-- bucket of its policy lives.
for k, ttl in pairs(spoilt) do
  local most = math.ceil(ttl / 1000) + slack
  local left = redis.call('PTTL', KEYS[k])
  if left < 0 or left > most then
    redis.call('PEXPIRE', KEYS[k], string.format('%d', most))
  end
end
return out
