-- Record what a worker did with a claimed delivery.
-- KEYS: entry, work:<route>, sched:<route>, attempts, dlq.
-- ARGV: msg id ('' for a probe taken from the schedule: see probe.lua), group, new
-- status, next_at, attempt JSON, last_error, now, entry id, reason, lease token,
-- route, key base (`hg:{src}:`), the audit JSON of a skip (see below), the activity
-- counter the completion moves ('d' delivered, 'f' failed, '': none), the failure
-- kind of the attempt ('' when it has none: `R:last_failure` keeps its value).
-- Only the holder of the delivery's current lease completes (returns 1). Anything
-- else returns 0 and changes nothing the current holder relies on (so a retried call
-- after a lost reply is harmless): a message claimed again by another worker after
-- this lease expired stays in its pending list, so that it is reclaimed should that
-- worker die too. A message that no longer stands for work (the delivery ended, a
-- replay gave it a newer message, the entry was purged) is acknowledged and deleted,
-- so the stream never leaks it; an attempt that ran while the delivery was
-- discarded is recorded, and the delivery stays discarded. The entry's status
-- follows its deliveries (`hg_settle`). A probe's delivery waits in the schedule
-- while leased, so it leaves it when it ends.
-- On an ordered route a delivery that ends leaves its key's line and lets the next
-- one go (`hg_line_done`), unless it is dead with `R:oblock`: it then holds the
-- line (its key joins `blocked:R`). A dead one that lets the next go gets the skip
-- audit event (ARGV[13]). A discarded delivery whose attempt was in flight held
-- its line until now. One that stays in its line (a retry, a release, dead with
-- `R:oblock`) stays its head only while it is the line's first: a delivery of the
-- key that arrived before it and was replayed while its attempt ran goes first
-- (`hg_line_keep`), and this one waits behind it, unscheduled and not blocking.
local route, base, id, token = ARGV[11], ARGV[12], ARGV[8], ARGV[10]
local p = route .. ':'
local function drop_message()
  if ARGV[1] ~= '' then
    redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
    redis.call('XDEL', KEYS[2], ARGV[1])
  end
end
-- Everything the script reads of the entry, in one read.
local f = redis.call('HMGET', KEYS[1], 'status', p .. 'status', p .. 'lease', p .. 'msg',
  p .. 'okey', p .. 'oblock', 'routes', p .. 'attempts')
local exists, status, lease, msg = f[1], f[2] or 'pending', f[3], f[4]
local okey, oblock = f[5], f[6]
if not exists or status ~= 'pending' or lease ~= token then
  if exists and status == 'pending' and msg == ARGV[1] then
    return 0
  end
  drop_message()
  if exists and status == 'discarded' and lease == token then
    redis.call('HDEL', KEYS[1], p .. 'lease', p .. 'lease_until')
    if okey then hg_line_done(base, route, okey, id) end
    if ARGV[5] ~= '' then
      redis.call('RPUSH', KEYS[4], ARGV[5])
      redis.call('HINCRBY', KEYS[1], p .. 'attempts', 1)
    end
  end
  return 0
end
drop_message()
-- The delivery's fields change in one HSET and one HDEL (the attempt count was read
-- above, and nothing else runs meanwhile).
local set = {}
if ARGV[5] ~= '' then
  redis.call('RPUSH', KEYS[4], ARGV[5])
  set[#set + 1] = p .. 'attempts'
  set[#set + 1] = string.format('%d', (tonumber(f[8]) or 0) + 1)
end
if ARGV[6] ~= '' then
  set[#set + 1] = p .. 'last_error'
  set[#set + 1] = ARGV[6]
end
if ARGV[15] ~= '' then
  set[#set + 1] = p .. 'last_failure'
  set[#set + 1] = ARGV[15]
end
if ARGV[3] == 'pending' then
  set[#set + 1] = p .. 'next'
  set[#set + 1] = ARGV[4]
  redis.call('HDEL', KEYS[1], p .. 'lease', p .. 'lease_until', p .. 'msg')
  redis.call('HSET', KEYS[1], unpack(set))
  if not okey or hg_line_keep(base, route, okey, id) then
    redis.call('ZADD', KEYS[3], ARGV[4], id)
  else
    redis.call('ZREM', KEYS[3], id)
  end
else
  set[#set + 1] = p .. 'status'
  set[#set + 1] = ARGV[3]
  if ARGV[3] == 'dead' then
    set[#set + 1] = p .. 'dead_at'
    set[#set + 1] = ARGV[7]
  end
  redis.call('HDEL', KEYS[1], p .. 'lease', p .. 'lease_until', p .. 'msg', p .. 'next')
  redis.call('HSET', KEYS[1], unpack(set))
  if ARGV[1] == '' then redis.call('ZREM', KEYS[3], id) end
  hg_route_index(base, route, id, 'pending', ARGV[3])
  if ARGV[3] == 'dead' then
    redis.call('XADD', KEYS[5], '*', 'id', id, 'route', route, 'reason', ARGV[9])
  end
  if okey then
    if ARGV[3] == 'dead' and oblock == '1' then
      if hg_line_keep(base, route, okey, id) then
        redis.call('SADD', base .. 'blocked:' .. route, okey)
      end
    else
      hg_line_done(base, route, okey, id)
      if ARGV[3] == 'dead' then redis.call('RPUSH', base .. 'audit:' .. id, ARGV[13]) end
    end
  end
end
-- The entry's status from its deliveries': this one's is known, the others' are
-- read (none on an entry with one route).
local routes, others, statuses = hg_routes(f[7]), {}, {}
for _, r in ipairs(routes) do
  if r == route then
    statuses[#statuses + 1] = ARGV[3]
  else
    others[#others + 1] = r .. ':status'
  end
end
if #others > 0 then
  for _, s in ipairs(redis.call('HMGET', KEYS[1], unpack(others))) do
    statuses[#statuses + 1] = s or 'pending'
  end
end
hg_settle_as(base, KEYS[1], id, ARGV[7], exists, statuses)
if ARGV[14] ~= '' then hg_count(base, ARGV[14], ARGV[7], 1) end
return 1
