-- Sluice quota: read the bucket index without its stale entries (those the
-- next index write may drop), by the server's `TIME` like every decision.
--
-- KEYS: 1 the index.
-- ARGV: 1 `count` or `list`, 2 how long an entry is kept after its last use
--       (ms), 3 list only entries used at or after this (Unix ms; 0 = all),
--       4 (`list`) at most this many, the least recently indexed first
--       (0 or absent = all).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local from = math.max(now - tonumber(ARGV[2]), tonumber(ARGV[3]))
if ARGV[1] == 'count' then
  return redis.call('ZCOUNT', KEYS[1], from, '+inf')
end
local limit = tonumber(ARGV[4] or '0')
if limit > 0 then
  return redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf', 'LIMIT', 0, limit)
end
return redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf')
