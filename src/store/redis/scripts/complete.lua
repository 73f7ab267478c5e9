-- Record what a worker did with a claimed entry.
-- KEYS: entry, work, sched, attempts, st:pending, st:<new>, done zset, dlq.
-- ARGV: msg id, group, new status, next_at, attempt JSON, last_error, now, entry id,
-- reason, lease token.
-- Only the holder of the current lease completes (returns 1). Anything else returns
-- 0 and changes nothing the current holder relies on (so a retried call after a lost
-- reply is harmless): a message claimed again by another worker after this lease
-- expired stays in its pending list, so that it is reclaimed should that worker die
-- too. A message that no longer stands for work (the entry ended, or a replay gave
-- it a newer message) is acknowledged and deleted, so the stream never leaks it;
-- an attempt that ran while the entry was discarded is recorded, and the status
-- stays discarded.
local status, lease, msg = unpack(redis.call('HMGET', KEYS[1], 'status', 'lease', 'msg'))
if status ~= 'pending' or lease ~= ARGV[10] then
  if status == 'pending' and msg == ARGV[1] then
    return 0
  end
  redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
  redis.call('XDEL', KEYS[2], ARGV[1])
  if status == 'discarded' and lease == ARGV[10] then
    redis.call('HSET', KEYS[1], 'lease', '')
    if ARGV[5] ~= '' then
      redis.call('RPUSH', KEYS[4], ARGV[5])
      redis.call('HINCRBY', KEYS[1], 'attempts', 1)
    end
  end
  return 0
end
redis.call('XACK', KEYS[2], ARGV[2], ARGV[1])
redis.call('XDEL', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'lease', '', 'msg', '')
if ARGV[5] ~= '' then
  redis.call('RPUSH', KEYS[4], ARGV[5])
  redis.call('HINCRBY', KEYS[1], 'attempts', 1)
end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'last_error', ARGV[6]) end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'next_attempt_at', ARGV[4], 'updated_at', ARGV[7])
if ARGV[3] == 'pending' then
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[8])
else
  redis.call('ZREM', KEYS[5], ARGV[8])
  redis.call('ZADD', KEYS[6], 0, ARGV[8])
  redis.call('ZADD', KEYS[7], ARGV[7], ARGV[8])
  if ARGV[3] == 'dead' then
    redis.call('XADD', KEYS[8], '*', 'id', ARGV[8], 'reason', ARGV[9])
  end
end
return 1
