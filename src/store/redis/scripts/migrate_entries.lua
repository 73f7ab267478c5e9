-- Migration to routes, a batch of entries of one source: each entry written before
-- routes existed gets one delivery, through the default route, holding its status,
-- next attempt, attempts, lease, stream message, retry budget and last error as
-- they were, and a place in that route's status index. An entry that has `routes`
-- already (migrated before, or written since) is left as it is.
-- KEYS: entry keys. ARGV: key base (`hg:{src}:`), then the entry ids, in KEYS order.
-- Returns how many entries were migrated.
local base = ARGV[1]
local old = {'next_attempt_at', 'attempts', 'lease', 'msg', 'budget_start',
  'budget_attempts', 'last_error'}
local new = {'next', 'attempts', 'lease', 'msg', 'budget_start', 'budget_attempts',
  'last_error'}
local n = 0
for i, ek in ipairs(KEYS) do
  local id = ARGV[i + 1]
  local f = redis.call('HMGET', ek, 'status', 'routes', unpack(old))
  if f[1] and not f[2] then
    local fields = {'routes', 'default', 'default:status', f[1]}
    for j, name in ipairs(new) do
      local v = f[j + 2]
      if v and v ~= '' and (name ~= 'next' or f[1] == 'pending') then
        fields[#fields + 1] = 'default:' .. name
        fields[#fields + 1] = v
      end
    end
    redis.call('HDEL', ek, unpack(old))
    redis.call('HSET', ek, unpack(fields))
    redis.call('ZADD', base .. 'rst:default:' .. f[1], 0, id)
    n = n + 1
  end
end
return n
