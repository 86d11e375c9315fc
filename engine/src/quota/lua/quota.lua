-- Sluice quota: one atomic operation on one bucket, with its stats.
-- The math mirrors engine/src/quota/decision.rs line for line; the contract
-- suite (engine/tests/quota_contract.rs) holds both to the same behaviour.
--
-- KEYS: 1 bucket hash, 2 sliding log (zset), 3 leases (zset), 4 stats hash.
--       All four share the account's hash tag, so this runs on Redis Cluster.
-- ARGV: 1 op, 2 algorithm, 3 tokens, 4 interval (us), 5 burst, 6 how long
--       the stats hash outlives the last decision (s), 7.. per op.
-- Time is Redis TIME in microseconds since the Unix epoch. Every number sent
-- back to Redis is formatted with %.0f: Lua would print 1.7e+15 otherwise.

local bucket, logk, leasek, statk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, algo = ARGV[1], ARGV[2]
local tokens, w, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local stats_ttl = tonumber(ARGV[6])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local function s(x) return string.format('%.0f', x) end
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function cdiv(a, b)
  local q = fdiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end
local function inc(cost) return cdiv(cost * w, tokens) end
local span = fdiv(burst * w, tokens)

local st = redis.call('HMGET', bucket, 'tat', 'win', 'used', 'blk')
local tat, win, used, blk = tonumber(st[1]) or 0, tonumber(st[2]) or 0, tonumber(st[3]) or 0, tonumber(st[4]) or 0

local function stat(field, by) redis.call('HINCRBY', statk, field, s(by)) end
local function touch_stats()
  redis.call('HSET', statk, 'last_at_ms', s(fdiv(now, 1000)))
  redis.call('EXPIRE', statk, stats_ttl)
end
local function wait_bucket(wait)
  local ms, b = fdiv(wait, 1000), 0
  while ms > 0 do ms = fdiv(ms, 2); b = b + 1 end
  if b > 21 then b = 21 end
  return b
end

local function prune() redis.call('ZREMRANGEBYSCORE', logk, '-inf', s(now - w)) end
local function last_entry()
  local last = redis.call('ZRANGE', logk, -1, -1, 'WITHSCORES')
  if last[2] then return tonumber(last[2]) end
  return nil
end

local function cursor()
  local floor_ = fdiv(now, w)
  if blk > now then
    local b = fdiv(blk, w)
    if b > floor_ then floor_ = b end
  end
  if win >= floor_ then return win, used end
  return floor_, 0
end

local function earliest(cost)
  if algo == 'token_bucket' then
    return math.max(math.max(tat, now) + inc(cost) - span, now)
  elseif algo == 'fixed_window' then
    local cw, cu = cursor()
    if cu + cost > tokens then cw = cw + 1 end
    return math.max(cw * w, now, blk)
  end
  prune()
  local at = math.max(now, blk, last_entry() or now)
  local m = redis.call('ZCARD', logk)
  local others = math.max(tokens - cost, 0)
  if m > others then
    local e = redis.call('ZRANGE', logk, m - others - 1, m - others - 1, 'WITHSCORES')
    at = math.max(at, tonumber(e[2]) + w)
  end
  return at
end

local function book(at, cost)
  if algo == 'token_bucket' then
    tat = math.max(tat, now) + inc(cost)
  elseif algo == 'fixed_window' then
    local cw, cu = cursor()
    local bw = fdiv(at, w)
    if bw == cw then used = cu + cost else used = cost end
    win = bw
  else
    local seq = redis.call('HINCRBY', bucket, 'seq', cost)
    for i = 1, cost do redis.call('ZADD', logk, s(at), s(at) .. ':' .. s(seq - cost + i)) end
  end
end

-- Write the state back with a TTL: until the bucket would read as full
-- again, plus a minute. An evicted key reads as a full bucket.
local function save()
  local rel
  if algo == 'token_bucket' then rel = tat
  elseif algo == 'fixed_window' then rel = (win + 1) * w
  else rel = (last_entry() or 0) + w end
  rel = math.max(rel, blk)
  local ttl = math.max(fdiv(rel - now, 1000), 0) + 60000
  redis.call('HSET', bucket, 'tat', s(tat), 'win', s(win), 'used', s(used), 'blk', s(blk))
  redis.call('PEXPIRE', bucket, ttl)
  if algo == 'sliding_log' then redis.call('PEXPIRE', logk, ttl) end
end

-- Priority lanes (engine/src/quota/lane.rs): high may book one slot of its
-- size beyond the ceiling, low only what is free now, normal the ceiling.
-- (Low's token-bucket reserve is checked in 'decide' below.)
local function lane_horizon(lane, ceiling, cost)
  if lane == 'high' then
    if algo == 'token_bucket' then return ceiling + inc(cost) end
    return ceiling + w
  elseif lane == 'low' then
    return 0
  end
  return ceiling
end

-- Besides the totals, high and low count their own (normal's are the rest).
local function lane_stat(lane, field, by)
  if lane ~= 'normal' then stat(lane .. ':' .. field, by) end
end

local function block_until(untl)
  if algo == 'token_bucket' then
    tat = math.max(tat, untl - inc(1) + span)
  else
    blk = math.max(blk, untl)
  end
end

local function remaining_now()
  if algo == 'token_bucket' then
    local room = math.max(now + span - math.max(tat, now), 0)
    return math.min(fdiv(room * tokens, w), burst)
  elseif blk > now then
    return 0
  elseif algo == 'fixed_window' then
    local current = fdiv(now, w)
    if win < current then return tokens elseif win == current then return math.max(tokens - used, 0) end
    return 0
  end
  prune()
  return math.max(tokens - redis.call('ZCARD', logk), 0)
end

if op == 'decide' then
  local cost, ceiling, shadow = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9] == '1'
  local lmax, lid, lttl = tonumber(ARGV[10]), ARGV[11], tonumber(ARGV[12])
  local lane = ARGV[13] or 'normal'
  touch_stats()
  if lmax > 0 then
    redis.call('ZREMRANGEBYSCORE', leasek, '-inf', s(now))
    if not redis.call('ZSCORE', leasek, lid) and redis.call('ZCARD', leasek) >= lmax then
      stat('refused:concurrency_limit', 1)
      lane_stat(lane, 'refused', 1)
      if shadow then stat('shadow_blocks', 1) end
      return {0, 'concurrency_limit', -1}
    end
  end
  local at = earliest(cost)
  local wait = at - now
  local refuse = wait > lane_horizon(lane, ceiling, cost)
  if lane == 'low' and algo == 'token_bucket' and burst > cost then
    -- Low leaves the bucket's last token to the other lanes (Priority::decide).
    local short = math.max(tat, now) - now - fdiv((burst - cost - 1) * w, tokens)
    if short > 0 then refuse, wait = true, short end
  end
  if refuse then
    stat('refused:wait_ceiling_exceeded', 1)
    lane_stat(lane, 'refused', 1)
    if shadow then stat('shadow_blocks', 1) end
    return {0, 'wait_ceiling_exceeded', wait}
  end
  book(at, cost)
  save()
  local b = wait_bucket(wait)
  stat('grants', 1)
  stat('wait_sum_us', wait)
  stat('w' .. b, 1)
  lane_stat(lane, 'grants', 1)
  lane_stat(lane, 'wait_sum_us', wait)
  lane_stat(lane, 'w' .. b, 1)
  if wait >= 1000 then
    stat('waited', 1)
    lane_stat(lane, 'waited', 1)
    if shadow then stat('shadow_blocks', 1) end
  end
  local lease = ''
  if lmax > 0 then
    redis.call('ZADD', leasek, s(at + lttl), lid)
    local latest = redis.call('ZRANGE', leasek, -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', leasek, math.max(fdiv(tonumber(latest[2]) - now, 1000), 0) + 1000)
    lease = lid
  end
  return {1, wait, lease}
elseif op == 'penalize' then
  local floor_, retry = tonumber(ARGV[7]), tonumber(ARGV[8])
  local untl = now + math.max(floor_, retry)
  block_until(untl)
  save()
  stat('penalties', 1)
  touch_stats()
  return untl - now
elseif op == 'observe' then
  local remaining, reset = tonumber(ARGV[7]), tonumber(ARGV[8])
  stat('observations', 1)
  touch_stats()
  if remaining == 0 then
    block_until(now + reset)
    save()
    return 1
  end
  local available = remaining_now()
  if available <= remaining then return 0 end
  if algo == 'token_bucket' then
    tat = math.max(tat, now + span - inc(remaining))
  elseif algo == 'fixed_window' then
    local current = fdiv(now, w)
    if win < current then win = current; used = 0 end
    if win == current then used = math.max(used, tokens - remaining) end
  else
    book(math.max(now, last_entry() or now), available - remaining)
  end
  save()
  return 1
elseif op == 'peek' then
  local remaining = remaining_now()
  local cap = tokens
  if algo == 'token_bucket' then cap = burst end
  return {remaining, cap, earliest(1) - now}
elseif op == 'release' then
  return redis.call('ZREM', leasek, ARGV[7])
elseif op == 'refuse' then
  stat('refused:' .. ARGV[7], 1)
  lane_stat(ARGV[8] or 'normal', 'refused', 1)
  touch_stats()
  return 1
end
return redis.error_reply('unknown quota op ' .. tostring(op))
