-- The gateways dead by Redis's clock (`store::gateways`): seen within the
-- forget time, silent for the dead time, counted from no earlier than when
-- heartbeats last resumed; each is marked taken over (its next beat hears it).
-- KEYS: seen, clock, taken (as in heartbeat.lua). ARGV: dead after (ms), forget
-- after (ms), the asking gateway's id (never counted dead).
-- Returns the ids.
local seen, clock, taken = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead_ms = tonumber(ARGV[1])
local resumed = tonumber(redis.call('HGET', clock, 'resumed_at') or '0')
if now - resumed < dead_ms then
  return {}
end
local ids = redis.call('ZRANGEBYSCORE', seen,
  string.format('%d', now - tonumber(ARGV[2])), string.format('%d', now - dead_ms))
local out = {}
for _, id in ipairs(ids) do
  if id ~= ARGV[3] then
    redis.call('SADD', taken, id)
    out[#out + 1] = id
  end
end
return out
