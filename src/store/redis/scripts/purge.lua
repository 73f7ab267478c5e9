-- Remove the entries of one retention index that ended before a cutoff.
-- KEYS: done zset (done:delivered or done:dead). ARGV: cutoff, limit, key base
-- (`hg:{src}:`).
-- The per-entry keys and the indexes are derived from the base; they share the
-- source's hash tag. An entry leaves every index it is in: its status set, its
-- indexed values (`ix:<name>`) and the status sets of its routes (an ended delivery waits in no schedule). A pending entry is never removed (it
-- only leaves the retention index, where it should not be).
-- Returns how many entries were removed.
local base = ARGV[3]
local statuses = {'pending', 'delivered', 'dead', 'discarded', 'filtered'}
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[2])
local n = 0
for _, id in ipairs(ids) do
  local ek = base .. 'e:' .. id
  local f = redis.call('HMGET', ek, 'status', 'routes', 'ix')
  redis.call('ZREM', KEYS[1], id)
  if f[1] ~= 'pending' then
    -- Its indexed values (`name\0value` lines, see accept_many.lua).
    if f[3] then
      for line in string.gmatch(f[3], '[^\n]+') do
        local name, value = string.match(line, '^([^%z]*)%z(.*)$')
        if name then redis.call('ZREM', base .. 'ix:' .. name, value .. '\0' .. id) end
      end
    end
    local routes = hg_routes(f[2])
    for i, s in ipairs(hg_route_statuses(ek, routes)) do
      redis.call('ZREM', base .. 'rst:' .. routes[i] .. ':' .. s, id)
      -- A dead head that blocked its line: the line goes on without it.
      local okey = redis.call('HGET', ek, routes[i] .. ':okey')
      if okey then hg_line_done(base, routes[i], okey, id) end
    end
    if f[1] then
      redis.call('ZREM', base .. 'st:' .. f[1], id)
      n = n + 1
    else
      for _, s in ipairs(statuses) do redis.call('ZREM', base .. 'st:' .. s, id) end
    end
    redis.call('DEL', ek, base .. 'a:' .. id, base .. 'audit:' .. id)
  end
end
return n
