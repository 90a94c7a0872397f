-- rebase(now, tat, t, tau, tp, taup): a port of Gcra::rebase_in (algorithm/gcra.rs), in µs. A token
-- bucket's value keeps the numbers it was written under, "<tat> <t> <tau>" (see keys.rs): a
-- bucket is named by its policy's name, so a later call may decide it under other numbers (a
-- reload). Its level at `now` (its tokens, or its debt as negative tokens) is then kept,
-- capped at the new capacity, to refill at the new pace: the new tat is
-- now + clamp(taup - floor((tau - (tat - now)) × tp / t), 0, most), where most is what a bucket
-- of the new numbers can owe (max(taup, min(2 taup, 2^51))). Needs t, tau, tp, taup below
-- 2^52 (script.rs refuses larger policies) and tat - now below 2^52 (more is garbage).
--
-- Exact in doubles: the level is split into whole tokens q and a remainder r < t, so that
-- q × tp is formed only when it is below the new capacity (else the bucket is full, or owes
-- the most), and floor(r × tp / t), whose product would pass 2^53, is a long division bit by
-- bit, every intermediate below 2^53.

local floor, max, min = math.floor, math.max, math.min

-- floor(x × y / z) and its remainder, for 0 <= x < z < 2^52 and 0 <= y < 2^52.
local function muldiv(x, y, z)
  local q, r = 0, 0
  local bit = 2251799813685248 -- 2^51
  while bit >= 1 do
    -- Invariant: q × z + r = x × (the bits of y above `bit`), 0 <= r < z.
    q, r = 2 * q, 2 * r
    if r >= z then
      q, r = q + 1, r - z
    end
    if floor(y / bit) % 2 == 1 then
      r = r + x
      if r >= z then
        q, r = q + 1, r - z
      end
    end
    bit = bit / 2
  end
  return q, r
end

local function rebase(now, tat, t, tau, tp, taup)
  if tat <= now or (t == tp and tau == taup) then
    return tat
  end
  local most = max(taup, min(2 * taup, 2251799813685248))
  local level = tau - (tat - now)
  local down -- floor(level × tp / t)
  if level >= 0 then
    local q = floor(level / t)
    if q * tp >= taup then
      -- At least the new capacity: full.
      return now
    end
    down = q * tp + muldiv(level - q * t, tp, t)
  else
    local debt = -level
    local q = floor(debt / t)
    if q * tp >= most then
      return now + most
    end
    local f, r = muldiv(debt - q * t, tp, t)
    if r > 0 then
      f = f + 1
    end
    down = -(q * tp + f)
  end
  return now + min(max(taup - down, 0), most)
end
