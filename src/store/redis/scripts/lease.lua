-- Take the lease of a claimed stream message.
-- KEYS: entry. ARGV: message id, lease token.
-- Returns the entry, or nil when the message no longer stands for pending work (the
-- entry ended, was purged, or a newer message replaced this one). An empty `msg`
-- means no message stands for it: it waits in `sched` (a retry, a release, a
-- replay) until the promote script gives it one.
local status, msg = unpack(redis.call('HMGET', KEYS[1], 'status', 'msg'))
if status ~= 'pending' then return false end
if msg ~= ARGV[1] then return false end
redis.call('HSET', KEYS[1], 'lease', ARGV[2])
return redis.call('HGETALL', KEYS[1])
