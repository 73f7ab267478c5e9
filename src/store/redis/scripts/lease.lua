-- Take the lease of a delivery whose stream message a claim read.
-- KEYS: entry. ARGV: message id, lease token, route, key base (`hg:{src}:`).
-- Returns the entry hash, or nil when the message no longer stands for pending work
-- (the delivery ended, the entry was purged, or a newer message replaced this one).
-- An absent `R:msg` means no message stands for the delivery: it waits in
-- `sched:R` (a retry, a release, a replay, a probe's lease: see probe.lua) until the
-- promote script gives it one.
-- A message of a delivery discarded while leased whose holder died (its lease ran
-- out, and a claim took the message back) lets the delivery's ordering line go.
local route = ARGV[3]
local f = redis.call('HMGET', KEYS[1], 'status', route .. ':status', route .. ':msg',
  route .. ':okey')
if not f[1] then return false end
if (f[2] or 'pending') ~= 'pending' then
  if f[4] and f[3] == ARGV[1] then
    hg_line_done(ARGV[4], route, f[4], string.sub(KEYS[1], #ARGV[4] + 3))
  end
  return false
end
if f[3] ~= ARGV[1] then return false end
redis.call('HSET', KEYS[1], route .. ':lease', ARGV[2])
return redis.call('HGETALL', KEYS[1])
