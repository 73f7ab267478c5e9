-- Mark how an entry came (reconciliation), with its audit record, atomically.
-- KEYS: entry, audit.
-- ARGV: the origin ('' for received, whose field is absent), the audit JSON.
-- Returns 1, or 0 for an unknown entry (nothing written).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], 'origin')
else
  redis.call('HSET', KEYS[1], 'origin', ARGV[1])
end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
