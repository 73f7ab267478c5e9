-- Accept a batch of entries of one source: dedupe and persist, atomically.
-- KEYS: st:pending, stats, st:filtered, done:delivered, then per entry: dedupe key,
-- entry key.
-- ARGV: key base (`hg:{src}:`), then per entry: id, ttl ms, received at, the packed
-- write-once record, its routes (comma-separated; empty: filtered).
-- Returns per entry {duplicate (0|1), id}. Entries are taken in order, so a batch
-- holding the same event twice stores it once. Per route R the entry gets one
-- message on `work:R` (its id in `R:msg`) and a place in `rst:R:pending`. Fields
-- whose value is their default (`R:status` pending, `R:next` and `R:budget_start`
-- the arrival, counters 0) are not written: every webhook costs Redis (and its AOF)
-- only what it must. A filtered entry (no route) ends at once (its `updated_at`
-- absent: the arrival).
local base = ARGV[1]
local n = (#KEYS - 4) / 2
local out = {}
local new, dups = 0, 0
for i = 0, n - 1 do
  local dk, ek, a = KEYS[5 + 2 * i], KEYS[6 + 2 * i], 1 + 5 * i
  local id, routes = ARGV[a + 1], ARGV[a + 5]
  -- SET NX answers nil when the key is there: only a duplicate pays for the GET.
  if not redis.call('SET', dk, id, 'NX', 'PX', ARGV[a + 2]) then
    dups = dups + 1
    out[#out + 1] = {1, redis.call('GET', dk)}
  elseif routes == '' then
    redis.call('HSET', ek, 'record', ARGV[a + 4], 'routes', '', 'status', 'filtered')
    redis.call('ZADD', KEYS[3], 0, id)
    redis.call('ZADD', KEYS[4], ARGV[a + 3], id)
    new = new + 1
    out[#out + 1] = {0, id}
  else
    local fields = {'record', ARGV[a + 4], 'routes', routes, 'status', 'pending'}
    for r in string.gmatch(routes, '[^,]+') do
      fields[#fields + 1] = r .. ':msg'
      fields[#fields + 1] = redis.call('XADD', base .. 'work:' .. r, '*', 'id', id)
      redis.call('ZADD', base .. 'rst:' .. r .. ':pending', 0, id)
    end
    redis.call('HSET', ek, unpack(fields))
    redis.call('ZADD', KEYS[1], 0, id)
    new = new + 1
    out[#out + 1] = {0, id}
  end
end
if new > 0 then redis.call('HINCRBY', KEYS[2], 'received', new) end
if dups > 0 then redis.call('HINCRBY', KEYS[2], 'duplicates', dups) end
return out
