-- Accept a batch of entries of one source: dedupe and persist, atomically.
-- KEYS: work, st:pending, stats, then per entry: dedupe key, entry key.
-- ARGV: per entry: id, ttl ms, received at, the packed write-once record.
-- Returns per entry {duplicate (0|1), id}. Entries are taken in order, so a batch
-- holding the same event twice stores it once. Fields whose value is their default
-- (attempts, budget_attempts: 0; budget_start: received_at) are not written: every
-- webhook costs Redis (and its AOF) only what it must.
local n = (#KEYS - 3) / 2
local out = {}
local new, dups = 0, 0
for i = 0, n - 1 do
  local dk, ek, a = KEYS[4 + 2 * i], KEYS[5 + 2 * i], 4 * i
  -- SET NX answers nil when the key is there: only a duplicate pays for the GET.
  if not redis.call('SET', dk, ARGV[a + 1], 'NX', 'PX', ARGV[a + 2]) then
    dups = dups + 1
    out[#out + 1] = {1, redis.call('GET', dk)}
  else
    local mid = redis.call('XADD', KEYS[1], '*', 'id', ARGV[a + 1])
    redis.call('HSET', ek, 'record', ARGV[a + 4], 'status', 'pending',
      'next_attempt_at', ARGV[a + 3], 'msg', mid)
    redis.call('ZADD', KEYS[2], 0, ARGV[a + 1])
    new = new + 1
    out[#out + 1] = {0, ARGV[a + 1]}
  end
end
if new > 0 then redis.call('HINCRBY', KEYS[3], 'received', new) end
if dups > 0 then redis.call('HINCRBY', KEYS[3], 'duplicates', dups) end
return out
