-- Take the next send slot of a paced route (GCRA; the same arithmetic as
-- `store::pace::gcra`, in microseconds).
-- KEYS: the route's pace key (`pace:<route>`, the source's hash tag).
-- ARGV: now, spacing, burst.
-- Returns -1 when the slot is taken, else the time the next slot opens.
local now = tonumber(ARGV[1])
local spacing = math.max(tonumber(ARGV[2]), 1)
local tolerance = spacing * (math.max(tonumber(ARGV[3]), 1) - 1)
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
if tat - now > tolerance then
  return tat - tolerance
end
local next_tat = tat + spacing
-- Kept as long as it matters, then gone: an idle route starts with its burst.
redis.call('SET', KEYS[1], string.format('%.0f', next_tat), 'PX',
  math.floor((next_tat - now) / 1000) + 1000)
return -1
