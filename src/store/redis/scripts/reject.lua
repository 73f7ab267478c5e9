-- Keep a batch of rejected requests (store::rejection).
--
-- KEYS[1]  the set of groups ("<group source>|<reason>")
-- KEYS[2]  the counts hash: "<group source>|<reason>|<hour>|n" and "…|last"
-- KEYS[3…] one sorted set of rows per row below, in order (its group's)
-- ARGV[1]  rows kept per group
-- ARGV[2]  the number of rows
-- then per row: its group, its score (unix ms), its JSON
-- then per count: "<group source>|<reason>|<hour>", the count, the newest time
-- Answers nothing. No allow-oom flag: at maxmemory a flood of refusals must not
-- take the memory the acknowledged webhooks need.
local keep = tonumber(ARGV[1])
local rows = tonumber(ARGV[2])
local i = 3
for r = 1, rows do
  local key = KEYS[2 + r]
  redis.call('ZADD', key, ARGV[i + 1], ARGV[i + 2])
  redis.call('ZREMRANGEBYRANK', key, 0, -(keep + 1))
  redis.call('SADD', KEYS[1], ARGV[i])
  i = i + 3
end
while i <= #ARGV do
  local field = ARGV[i]
  redis.call('HINCRBY', KEYS[2], field .. '|n', ARGV[i + 1])
  local last = tonumber(redis.call('HGET', KEYS[2], field .. '|last') or '0')
  if tonumber(ARGV[i + 2]) > last then
    redis.call('HSET', KEYS[2], field .. '|last', ARGV[i + 2])
  end
  i = i + 3
end
return 0
