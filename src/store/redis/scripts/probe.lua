-- Lease the due retry of one route that a half-open breaker's probe sends, straight
-- from the route's schedule.
-- KEYS: sched:<route>. ARGV: now, most members looked at, key base (`hg:{src}:`),
-- route, lease token, lease end (ms). The entry keys are derived from the base and
-- share the source's hash tag.
-- Looks through the due members of the schedule, due first, for a pending delivery
-- that was attempted before (`R:attempts` > 0: a retry, or a replay of one that
-- failed); a release or a replay of a delivery never attempted is passed over, and
-- so is a member whose delivery ended or has a stream message (the claim script
-- drops or moves those). The one found keeps its place in the schedule, scored at
-- its lease end: no claim or probe takes it before then, and if its holder dies it
-- is due again then, as an expired stream lease is. It has no stream message (the
-- complete script knows such a claim by its empty message id).
-- Returns {entry id, entry hash}, or nil when no member qualifies.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local base, route = ARGV[3], ARGV[4]
local p = route .. ':'
for _, id in ipairs(ids) do
  local ek = base .. 'e:' .. id
  local f = redis.call('HMGET', ek, 'status', p .. 'status', p .. 'attempts', p .. 'msg')
  if f[1] and (f[2] or 'pending') == 'pending' and tonumber(f[3] or '0') > 0 and not f[4] then
    redis.call('ZADD', KEYS[1], ARGV[6], id)
    redis.call('HSET', ek, p .. 'lease', ARGV[5], p .. 'lease_until', ARGV[6])
    return {id, redis.call('HGETALL', ek)}
  end
end
return false
