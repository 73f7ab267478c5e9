-- Raise a number kept as a string: set it to a value only when that is greater
-- than what it holds (a missing key holds 0).
-- KEYS: the key.
-- ARGV: the value.
-- Returns 1 when the key was raised, 0 otherwise.
local v = tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if v <= cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
