-- Move the retries of one route that are due from its schedule to its work stream.
-- KEYS: sched:<route>, work:<route>. ARGV: now, limit, key base (`hg:{src}:`),
-- route. The entry keys are derived from the base and share the source's hash tag.
-- Returns how many ids left the schedule. A delivery that is no longer pending (or
-- an entry purged meanwhile) just leaves it; one discarded while a probe held it
-- lets its ordering line go.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local route = ARGV[4]
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local ek = ARGV[3] .. 'e:' .. id
  local f = redis.call('HMGET', ek, 'status', route .. ':status', route .. ':okey')
  if f[1] and (f[2] or 'pending') == 'pending' then
    local mid = redis.call('XADD', KEYS[2], '*', 'id', id)
    redis.call('HSET', ek, route .. ':msg', mid)
  elseif f[3] then
    hg_line_done(ARGV[3], route, f[3], id)
  end
end
return #ids
