-- Load one upstream breaker with the server's clock.
-- KEYS[1] = {prefix}:br:{<account>}:<scope>
-- Returns { seconds, microseconds, { field, value, ... } } (empty hash = fresh breaker).
local t = redis.call('TIME')
return { t[1], t[2], redis.call('HGETALL', KEYS[1]) }
