-- Replay or discard deliveries of an entry (operators), with the audit record.
-- KEYS: entry, audit.
-- ARGV: action (replay|discard), entry id, at, now, audit JSON, route ('' when none
-- was named), key base (`hg:{src}:`).
-- Returns {0, ''} for an unknown entry, {3, ''} when the named route is not one of
-- the entry's, {2, status} when the status does not allow the action (the named
-- delivery's, else the entry's), {1, routes} when done (the routes it applied to,
-- comma-separated).
-- With a route: that delivery (replay: unless pending; discard: when pending or
-- dead). Without: replay takes every dead or discarded delivery, or, when there is
-- none and every one was delivered, all of them; discard takes every pending or dead
-- one. A replay queues each at `at` with a fresh retry budget; a discard keeps the
-- lease, so that a worker delivering it right now records its attempt (complete).
-- On an ordered route, a replayed delivery rejoins its key's line in its place
-- (arrival order): it goes first when it arrived before the line's head, at once
-- unless that head is in flight, and then once the head's attempt ends or its
-- lease is taken back (complete, claim); else it waits behind the head. A discarded
-- one leaves the line at once, unless its attempt is in flight (its lease running
-- at `now`): it holds the line until that attempt ends (complete) or its lease is
-- taken back (claim).
local action, id, route, base = ARGV[1], ARGV[2], ARGV[6], ARGV[7]
-- Whether the delivery through `r` of the entry at `ek` is in flight: leased, and
-- its lease not run out at `now` (a lease taken before leases kept their end
-- counts as running).
local function in_flight(ek, r)
  local l = redis.call('HMGET', ek, r .. ':lease', r .. ':lease_until')
  return l[1] and (not l[2] or tonumber(l[2]) > tonumber(ARGV[4]))
end
local f = redis.call('HMGET', KEYS[1], 'status', 'routes')
if not f[1] then return {0, ''} end
local routes = hg_routes(f[2])
local statuses = hg_route_statuses(KEYS[1], routes)
local takes
if action == 'replay' then
  takes = function(s) return s == 'dead' or s == 'discarded' end
else
  takes = function(s) return s == 'pending' or s == 'dead' end
end
local targets = {}
if route ~= '' then
  local found
  for i, r in ipairs(routes) do
    if r == route then found = i end
  end
  if not found then return {3, ''} end
  local s = statuses[found]
  if (action == 'replay' and s == 'pending') or (action == 'discard' and not takes(s)) then
    return {2, s}
  end
  targets[1] = {route, s}
else
  local delivered = #routes > 0
  for i, r in ipairs(routes) do
    if takes(statuses[i]) then targets[#targets + 1] = {r, statuses[i]} end
    if statuses[i] ~= 'delivered' then delivered = false end
  end
  if #targets == 0 and action == 'replay' and delivered then
    for i, r in ipairs(routes) do targets[i] = {r, statuses[i]} end
  end
  if #targets == 0 then return {2, f[1]} end
end
local names = {}
for i, t in ipairs(targets) do
  local r, s = t[1], t[2]
  local p = r .. ':'
  names[i] = r
  if action == 'replay' then
    local attempts = redis.call('HGET', KEYS[1], p .. 'attempts') or '0'
    redis.call('HSET', KEYS[1], p .. 'status', 'pending', p .. 'next', ARGV[3],
      p .. 'budget_start', ARGV[4], p .. 'budget_attempts', attempts)
    redis.call('HDEL', KEYS[1], p .. 'lease', p .. 'lease_until', p .. 'msg')
    local okey = redis.call('HGET', KEYS[1], p .. 'okey')
    if okey then
      redis.call('ZADD', base .. 'line:' .. r .. ':' .. okey, 0, id)
      local head = redis.call('GET', base .. 'lhead:' .. r .. ':' .. okey)
      -- A head in flight (its lease running: pending, or discarded while its
      -- attempt runs) keeps the line until its attempt ends or its lease is taken
      -- back; any other (this one, whose lease the replay just ended; one waiting
      -- for its time; a dead one that blocks) gives way at once: the line starts
      -- again from its first, which is this one when it arrived first.
      if head == id or not head or not in_flight(base .. 'e:' .. head, r) then
        hg_line_restart(base, r, okey)
      end
    else
      redis.call('ZADD', base .. 'sched:' .. r, ARGV[3], id)
    end
    hg_route_index(base, r, id, s, 'pending')
  else
    redis.call('HSET', KEYS[1], p .. 'status', 'discarded')
    redis.call('HDEL', KEYS[1], p .. 'next')
    local okey = redis.call('HGET', KEYS[1], p .. 'okey')
    if okey and in_flight(KEYS[1], r) then
      -- In flight: it holds its line until the attempt ends. (A probe's lease keeps
      -- its place in the schedule: a claim lets the line go should its holder die.)
      redis.call('ZREM', base .. 'line:' .. r .. ':' .. okey, id)
    else
      redis.call('ZREM', base .. 'sched:' .. r, id)
      if okey then hg_line_done(base, r, okey, id) end
    end
    hg_route_index(base, r, id, s, 'discarded')
  end
end
hg_settle(base, KEYS[1], id, ARGV[4])
redis.call('RPUSH', KEYS[2], ARGV[5])
return {1, table.concat(names, ',')}
