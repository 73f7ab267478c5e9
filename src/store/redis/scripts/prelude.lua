-- Helpers shared by the scripts that read or change deliveries; `scripts.rs` puts
-- this text in front of each of them (Lua scripts cannot share code otherwise).
-- No KEYS or ARGV of its own: every helper takes the key base (`hg:{src}:`) and
-- derives the keys of the source from it (they share its hash tag).
-- An entry hash holds `routes` (its route names, comma-separated, in order), its
-- derived `status` and `updated_at`, and per route R the fields `R:status` (absent:
-- pending), `R:next` (absent: received at), `R:attempts`, `R:lease` (the lease
-- token) and `R:lease_until` (when the lease ends), `R:msg`,
-- `R:budget_start`, `R:budget_attempts`, `R:last_error`, `R:last_failure`, and on an ordered route
-- `R:okey` (the ordering key) and `R:oblock` ('1': a dead head blocks its line).
--
-- Ordered routes: the deliveries of one key wait in the key's line,
-- `line:R:<key>` (a sorted set of entry ids, all scored 0, so in id order: arrival
-- order). Only the line's head, named by `lhead:R:<key>`, is ever scheduled or in
-- the work stream; the others have no message and are in no schedule. The head
-- stays the head while it retries, while it is leased (even once discarded), and
-- while it is dead with `R:oblock` (its key is then in `blocked:R`); when it ends
-- otherwise, the next one becomes the head and is scheduled (`hg_line_next`). A
-- delivery replayed into a line takes its place by arrival: before a head that is
-- not in flight at once (`hg_line_restart`), before one in flight once that
-- head's attempt ends or its lease is taken back (`hg_line_keep`).

-- The route names of a `routes` field, in order (none for a filtered entry).
local function hg_routes(text)
  local out = {}
  if text then
    for r in string.gmatch(text, '[^,]+') do out[#out + 1] = r end
  end
  return out
end

-- The statuses of an entry's deliveries, in route order.
local function hg_route_statuses(ek, routes)
  local statuses = {}
  if #routes == 0 then return statuses end
  local names = {}
  for i, r in ipairs(routes) do names[i] = r .. ':status' end
  local got = redis.call('HMGET', ek, unpack(names))
  for i = 1, #routes do statuses[i] = got[i] or 'pending' end
  return statuses
end

-- The retention index of an ended entry status (`Status::retention`).
local hg_done = {delivered = 'done:delivered', filtered = 'done:delivered',
  dead = 'done:dead', discarded = 'done:dead'}

-- Move delivery `id` through `route` from status `from` to `to` in the route's
-- status index (`rst:<route>:<status>`).
local function hg_route_index(base, route, id, from, to)
  if from == to then return end
  redis.call('ZREM', base .. 'rst:' .. route .. ':' .. from, id)
  redis.call('ZADD', base .. 'rst:' .. route .. ':' .. to, 0, id)
end

-- Derive the status of entry `id` (hash `ek`, status `old`) from the statuses of
-- its deliveries (`Status::of_entry`) and, when it changed, move the entry between
-- the status indexes and the retention indexes (scored `now`, when it reached the
-- status). Answers the status.
local function hg_settle_as(base, ek, id, now, old, statuses)
  local seen = {}
  for _, s in ipairs(statuses) do
    seen[s] = true
  end
  local new = 'filtered'
  if seen.pending then new = 'pending'
  elseif seen.dead then new = 'dead'
  elseif seen.discarded then new = 'discarded'
  elseif seen.delivered then new = 'delivered' end
  if new == old then return new end
  if old then redis.call('ZREM', base .. 'st:' .. old, id) end
  redis.call('ZADD', base .. 'st:' .. new, 0, id)
  redis.call('HSET', ek, 'status', new, 'updated_at', now)
  if old and hg_done[old] then redis.call('ZREM', base .. hg_done[old], id) end
  if hg_done[new] then redis.call('ZADD', base .. hg_done[new], now, id) end
  return new
end

-- `hg_settle_as`, the entry's status and its deliveries' read from its hash.
local function hg_settle(base, ek, id, now)
  local f = redis.call('HMGET', ek, 'status', 'routes')
  return hg_settle_as(base, ek, id, now, f[1], hg_route_statuses(ek, hg_routes(f[2])))
end


-- Make the first of the line of `key` through `route` its head, unless it has one:
-- schedule it (at its next attempt; at once when new), or, when it is dead (a
-- blocking head replayed behind an earlier one), mark the key blocked.
local function hg_line_next(base, route, key)
  local head_key = base .. 'lhead:' .. route .. ':' .. key
  if redis.call('EXISTS', head_key) == 1 then return end
  local first = redis.call('ZRANGE', base .. 'line:' .. route .. ':' .. key, 0, 0)[1]
  if not first then return end
  redis.call('SET', head_key, first)
  local f = redis.call('HMGET', base .. 'e:' .. first, route .. ':status', route .. ':next')
  if (f[1] or 'pending') == 'pending' then
    redis.call('ZADD', base .. 'sched:' .. route, f[2] or 0, first)
  else
    redis.call('SADD', base .. 'blocked:' .. route, key)
  end
end

-- The line of `key` through `route` starts again from its first: its head, unless
-- it is in flight, gives way (a pending head leaves the schedule, and its stream
-- message, if it has one, stands for nothing any more), and the first becomes the
-- head (`hg_line_next`). For a delivery replayed into the line: it goes first when
-- it arrived first.
local function hg_line_restart(base, route, key)
  local head_key = base .. 'lhead:' .. route .. ':' .. key
  local head = redis.call('GET', head_key)
  if head then
    local hk = base .. 'e:' .. head
    if (redis.call('HGET', hk, route .. ':status') or 'pending') == 'pending' then
      redis.call('ZREM', base .. 'sched:' .. route, head)
      redis.call('HDEL', hk, route .. ':msg')
    end
    redis.call('DEL', head_key)
    redis.call('SREM', base .. 'blocked:' .. route, key)
  end
  hg_line_next(base, route, key)
end

-- The head `id` of the line of `key` through `route` stays in the line once its
-- attempt ended (a retry, a release, dead with `block`) or its lease ran out: it
-- stays the head only while it is the line's first. A delivery of the key that
-- arrived before it and was replayed while it was in flight waits in the line
-- before it: the head goes to that one, and `id` waits behind. Answers whether `id`
-- is still the head.
local function hg_line_keep(base, route, key, id)
  local first = redis.call('ZRANGE', base .. 'line:' .. route .. ':' .. key, 0, 0)[1]
  if first == id then return true end
  local head_key = base .. 'lhead:' .. route .. ':' .. key
  if redis.call('GET', head_key) == id then
    redis.call('DEL', head_key)
    redis.call('SREM', base .. 'blocked:' .. route, key)
    hg_line_next(base, route, key)
  end
  return false
end

-- Delivery `id` of the line of `key` through `route` ended (delivered, dead with
-- skip, discarded, purged): it leaves the line, and if it was the head the next one
-- becomes the head.
local function hg_line_done(base, route, key, id)
  redis.call('ZREM', base .. 'line:' .. route .. ':' .. key, id)
  local head_key = base .. 'lhead:' .. route .. ':' .. key
  if redis.call('GET', head_key) == id then
    redis.call('DEL', head_key)
    redis.call('SREM', base .. 'blocked:' .. route, key)
    hg_line_next(base, route, key)
  end
end

-- Per-minute activity (`store::activity`): add `n` to counter `kind` ('r' received,
-- 'd' delivered, 'f' failed) of the minute holding `at` (unix ms). One hash per UTC
-- day, `act:<day>` (days since 1970), fields `<kind><minute>` (minutes since 1970);
-- it expires `HG_ACTIVITY_MS` (`ACTIVITY_RETENTION`) after its day ends, set when a
-- field is created (once per minute and kind, not per count).
local HG_DAY_MS = 86400000
local HG_ACTIVITY_MS = 2505600000
local function hg_count(base, kind, at, n)
  local ms = tonumber(at)
  if not ms then return end
  local day = math.floor(ms / HG_DAY_MS)
  local k = base .. 'act:' .. string.format('%d', day)
  local field = kind .. string.format('%d', math.floor(ms / 60000))
  if redis.call('HINCRBY', k, field, n) == n then
    redis.call('PEXPIREAT', k, string.format('%d', (day + 1) * HG_DAY_MS + HG_ACTIVITY_MS))
  end
end

-- The event id, event type and arrival time of the entry at `k`, from the metadata
-- line in front of the body in its packed record (nil each when absent). A hash
-- field cannot be read in part: the body costs a copy inside the script, never the
-- network.
local function hg_record_meta(k)
  local record = redis.call('HGET', k, 'record')
  local nl = record and string.find(record, '\n', 1, true)
  if nl then
    local ok, meta = pcall(cjson.decode, string.sub(record, 1, nl - 1))
    if ok and type(meta) == 'table' then
      return meta.event_id, meta.event_type, meta.received_at
    end
  end
  return nil, nil, nil
end
