-- Status transitions by operators.
-- KEYS: entry, st:pending, st:delivered, st:dead, st:discarded, sched,
-- done:delivered, done:dead, audit.
-- ARGV: action (replay|discard), entry id, at, now, audit JSON.
-- Returns {0, ''} for an unknown entry, {2, status} when its status does not allow
-- the action, {1, status} when done.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {0, ''} end
local action = ARGV[1]
if action == 'replay' and status == 'pending' then return {2, status} end
if action == 'discard' and status ~= 'pending' and status ~= 'dead' then return {2, status} end
local status_set = {pending = KEYS[2], delivered = KEYS[3], dead = KEYS[4], discarded = KEYS[5]}
redis.call('ZREM', status_set[status], ARGV[2])
if action == 'replay' then
  local attempts = redis.call('HGET', KEYS[1], 'attempts') or '0'
  redis.call('HSET', KEYS[1], 'status', 'pending', 'next_attempt_at', ARGV[3],
    'budget_start', ARGV[4], 'budget_attempts', attempts, 'updated_at', ARGV[4],
    'lease', '', 'msg', '')
  redis.call('ZADD', KEYS[2], 0, ARGV[2])
  redis.call('ZREM', KEYS[7], ARGV[2])
  redis.call('ZREM', KEYS[8], ARGV[2])
  redis.call('ZADD', KEYS[6], ARGV[3], ARGV[2])
else
  -- The lease stays: a worker delivering it right now records its attempt (COMPLETE).
  redis.call('HSET', KEYS[1], 'status', 'discarded', 'next_attempt_at', '', 'updated_at', ARGV[4])
  redis.call('ZADD', KEYS[5], 0, ARGV[2])
  redis.call('ZREM', KEYS[6], ARGV[2])
  redis.call('ZADD', KEYS[8], ARGV[4], ARGV[2])
end
redis.call('RPUSH', KEYS[9], ARGV[5])
return {1, status}
