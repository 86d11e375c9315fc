-- Store one upstream breaker if nobody wrote it since it was loaded.
-- KEYS[1] = {prefix}:br:{<account>}:<scope>
-- ARGV[1] = expected version ("0" for a missing key), ARGV[2] = TTL in ms,
-- ARGV[3..] = field, value, ... (the whole state).
-- Returns { 1, seconds, microseconds } (Redis TIME) if written (the version
-- becomes expected + 1), { 0 } if the version moved.
local current = redis.call('HGET', KEYS[1], 'version') or '0'
if current ~= ARGV[1] then
  return { 0 }
end
redis.call('DEL', KEYS[1])
local fields = { 'version', tostring(tonumber(ARGV[1]) + 1) }
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local t = redis.call('TIME')
return { 1, tonumber(t[1]), tonumber(t[2]) }
