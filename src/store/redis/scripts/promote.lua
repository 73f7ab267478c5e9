-- Move the retries that are due from the schedule to the work stream.
-- KEYS: sched, work. ARGV: now, limit, key base (`hg:{src}:`). The entry keys are
-- derived from the base and share the source's hash tag.
-- Returns how many ids left the schedule.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local ek = ARGV[3] .. 'e:' .. id
  if redis.call('HGET', ek, 'status') == 'pending' then
    local mid = redis.call('XADD', KEYS[2], '*', 'id', id)
    redis.call('HSET', ek, 'msg', mid)
  end
end
return #ids
