-- Accept a batch of entries of one source: dedupe and persist, atomically.
-- KEYS: st:pending, stats, st:filtered, done:delivered, then per entry: dedupe key,
-- entry key.
-- ARGV: key base (`hg:{src}:`), then per entry: id, ttl ms, received at, the packed
-- write-once record, its routes (comma-separated; empty: filtered), its origin
-- ('' when received), the number n of its ordered routes, then n times: route,
-- ordering key, block ('1' or '0'), then the number m of its indexed values, then m
-- times: index name, value.
-- Returns per entry {duplicate (0|1), id}. Entries are taken in order, so a batch
-- holding the same event twice stores it once. Per route R the entry gets one
-- message on `work:R` (its id in `R:msg`) and a place in `rst:R:pending`; on an
-- ordered route it joins its key's line instead (the prelude says how), and only a
-- line's head is scheduled. Fields whose value is their default (`R:status`
-- pending, `R:next` and `R:budget_start` the arrival, counters 0, `origin`
-- received) are not written:
-- every webhook costs Redis (and its AOF) only what it must. A filtered entry (no
-- route) ends at once (its `updated_at` absent: the arrival). New entries count in
-- the activity of their minute of arrival (`hg_count`). Each indexed value of a
-- new entry is a member `<value>\0<id>` of `ix:<name>`, and the entry's `ix` field
-- lists them (`name\0value` lines) for the purge to remove.
local base = ARGV[1]
local function index_entry(ek, id, ix)
  if #ix == 0 then return end
  local kept = {}
  for _, p in ipairs(ix) do
    redis.call('ZADD', base .. 'ix:' .. p[1], 0, p[2] .. '\0' .. id)
    kept[#kept + 1] = p[1] .. '\0' .. p[2]
  end
  redis.call('HSET', ek, 'ix', table.concat(kept, '\n'))
end
local n = (#KEYS - 4) / 2
local out = {}
local new, dups = 0, 0
-- New entries per minute of arrival, counted once per minute at the end.
local minutes = {}
local function received_in(at)
  local m = math.floor((tonumber(at) or 0) / 60000)
  minutes[m] = (minutes[m] or 0) + 1
end
local a = 2
for i = 0, n - 1 do
  local dk, ek = KEYS[5 + 2 * i], KEYS[6 + 2 * i]
  local id, ttl, record, routes = ARGV[a], ARGV[a + 1], ARGV[a + 3], ARGV[a + 4]
  local received, origin = ARGV[a + 2], ARGV[a + 5]
  local ordered = {}
  local n_ordered = tonumber(ARGV[a + 6])
  for j = 0, n_ordered - 1 do
    local o = a + 7 + 3 * j
    ordered[ARGV[o]] = {ARGV[o + 1], ARGV[o + 2]}
  end
  a = a + 7 + 3 * n_ordered
  local ix = {}
  local n_ix = tonumber(ARGV[a])
  for j = 0, n_ix - 1 do
    ix[#ix + 1] = {ARGV[a + 1 + 2 * j], ARGV[a + 2 + 2 * j]}
  end
  a = a + 1 + 2 * n_ix
  -- SET NX answers nil when the key is there: only a duplicate pays for the GET.
  if not redis.call('SET', dk, id, 'NX', 'PX', ttl) then
    dups = dups + 1
    out[#out + 1] = {1, redis.call('GET', dk)}
  elseif routes == '' then
    if origin == '' then
      redis.call('HSET', ek, 'record', record, 'routes', '', 'status', 'filtered')
    else
      redis.call('HSET', ek, 'record', record, 'routes', '', 'status', 'filtered',
        'origin', origin)
    end
    index_entry(ek, id, ix)
    redis.call('ZADD', KEYS[3], 0, id)
    redis.call('ZADD', KEYS[4], received, id)
    received_in(received)
    new = new + 1
    out[#out + 1] = {0, id}
  else
    local fields = {'record', record, 'routes', routes, 'status', 'pending'}
    if origin ~= '' then
      fields[#fields + 1] = 'origin'
      fields[#fields + 1] = origin
    end
    local lines = {}
    for r in string.gmatch(routes, '[^,]+') do
      local o = ordered[r]
      if o then
        fields[#fields + 1] = r .. ':okey'
        fields[#fields + 1] = o[1]
        if o[2] == '1' then
          fields[#fields + 1] = r .. ':oblock'
          fields[#fields + 1] = '1'
        end
        lines[#lines + 1] = {r, o[1]}
      else
        fields[#fields + 1] = r .. ':msg'
        fields[#fields + 1] = redis.call('XADD', base .. 'work:' .. r, '*', 'id', id)
      end
      redis.call('ZADD', base .. 'rst:' .. r .. ':pending', 0, id)
    end
    redis.call('HSET', ek, unpack(fields))
    index_entry(ek, id, ix)
    -- After the hash exists: the line's next head is read from it.
    for _, l in ipairs(lines) do
      redis.call('ZADD', base .. 'line:' .. l[1] .. ':' .. l[2], 0, id)
      hg_line_next(base, l[1], l[2])
    end
    redis.call('ZADD', KEYS[1], 0, id)
    received_in(received)
    new = new + 1
    out[#out + 1] = {0, id}
  end
end
if new > 0 then redis.call('HINCRBY', KEYS[2], 'received', new) end
for m, c in pairs(minutes) do hg_count(base, 'r', m * 60000, c) end
if dups > 0 then redis.call('HINCRBY', KEYS[2], 'duplicates', dups) end
return out
