-- Sluice quota: put one bucket into the index the Quotas page lists, and
-- drop at most a batch of entries older than the idle retention, so no call
-- holds Redis for long however many buckets went idle at once.
--
-- KEYS: 1 the index (a sorted set: member account:scope:rule, score = last
--       use in Unix ms). A key of its own, so Cluster runs this on one slot.
-- ARGV: 1 member, 2 now (ms), 3 drop entries scored at or below this (ms),
--       4 the most entries to drop, 5 the index key's TTL (ms).

local index = KEYS[1]
redis.call('ZADD', index, ARGV[2], ARGV[1])
local stale = redis.call('ZRANGEBYSCORE', index, '-inf', ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
if #stale > 0 then redis.call('ZREM', index, unpack(stale)) end
redis.call('PEXPIRE', index, ARGV[5])
return #stale
