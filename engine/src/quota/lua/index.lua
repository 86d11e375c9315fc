-- Sluice quota: put one bucket into the index the Quotas page lists, and
-- drop at most a batch of entries older than the idle retention, so no call
-- holds Redis for long however many buckets went idle at once. Time is the
-- server's `TIME`, the clock every bucket decision uses.
--
-- KEYS: 1 the index (a sorted set: member account:scope:rule, score = last
--       use in Unix ms). A key of its own, so Cluster runs this on one slot.
-- ARGV: 1 member, 2 how long an entry is kept after its last use (ms),
--       3 the most entries to drop, 4 the index key's TTL (ms).

local index = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', index, now, ARGV[1])
local stale = redis.call('ZRANGEBYSCORE', index, '-inf', now - tonumber(ARGV[2]), 'LIMIT', 0, tonumber(ARGV[3]))
if #stale > 0 then redis.call('ZREM', index, unpack(stale)) end
redis.call('PEXPIRE', index, ARGV[4])
return #stale
