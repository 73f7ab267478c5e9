-- Record one gateway's heartbeat with Redis's clock (`store::gateways`).
-- KEYS: seen (sorted set, id → last seen ms), info (hash, id → JSON), clock (hash:
-- `last_beat`, `resumed_at`), taken (set of ids whose leases were taken over).
-- ARGV: id, info JSON, forget after (ms), resume gap (ms).
-- Returns {now, 1 when the gateway's leases were taken over since its last beat}.
-- A beat after a silence of every beat longer than the gap (Redis was down or
-- failed over) sets `resumed_at`: each gateway's silence is counted from then.
local seen, info, clock, taken = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = tonumber(redis.call('HGET', clock, 'last_beat') or '0')
if now - last > tonumber(ARGV[4]) then
  redis.call('HSET', clock, 'resumed_at', string.format('%d', now))
end
if now > last then
  redis.call('HSET', clock, 'last_beat', string.format('%d', now))
end
redis.call('ZADD', seen, now, id)
redis.call('HSET', info, id, ARGV[2])
local was_taken = redis.call('SREM', taken, id)
local old = redis.call('ZRANGEBYSCORE', seen, '-inf', '(' .. string.format('%d', now - tonumber(ARGV[3])))
for _, gone in ipairs(old) do
  redis.call('ZREM', seen, gone)
  redis.call('HDEL', info, gone)
  redis.call('SREM', taken, gone)
end
return {now, was_taken}
