-- Hold a paced route: no send slot opens before a time (a destination's
-- Retry-After), then the route is paced as before (the arithmetic of
-- `store::pace::held`, in microseconds). A hold never shortens one in place.
-- KEYS: the route's pace key (`pace:<route>`, the source's hash tag).
-- ARGV: now, until, spacing, burst.
-- Returns 1 when the hold moved the route's next send time, 0 otherwise.
local now = tonumber(ARGV[1])
local untl = tonumber(ARGV[2])
local spacing = math.max(tonumber(ARGV[3]), 1)
local tolerance = spacing * (math.max(tonumber(ARGV[4]), 1) - 1)
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local held = untl + tolerance
if held <= tat then return 0 end
redis.call('SET', KEYS[1], string.format('%.0f', held), 'PX',
  math.floor((held - now) / 1000) + 1000)
return 1
