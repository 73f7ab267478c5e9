-- What a listing shows of entries (no headers, no body).
-- KEYS: entry keys of one source. ARGV: an event type and an event id to match
-- ('' or absent: any); an entry that does not match answers false, as a gone one
-- does, so that a search sends back only what it found.
-- Returns per key false (gone, or not a match) or {status, attempts, next_attempt_at, last_error,
-- event_id, event_type, received_at, origin}, all text ('' when absent): the status as
-- stored (derived from the deliveries), the rest summed up from the deliveries as
-- `Entry::summary` does (attempts of every route, the earliest next attempt of a
-- pending one, the last error of the first one not delivered that has one).
-- The event id and type of an entry sit in the metadata line of its packed record,
-- in front of the body (`hg_record_meta`): the body costs Redis a copy inside the
-- script, never the network or the gateway's memory. (Keeping the summary in a
-- field of its own would cost every accept, the hot path, instead.)
local function text(v)
  if type(v) == 'string' then return v end
  if type(v) == 'number' then return string.format('%.0f', v) end
  return ''
end
-- The listed row of the entry at `k` (its hash fields `f`: status, routes, origin), whose
-- metadata says `eid`, `etype`, `at`.
local function row(k, f, eid, etype, at)
  local attempts, next_at, last_error = 0, nil, nil
  for _, r in ipairs(hg_routes(f[2])) do
    local d = redis.call('HMGET', k, r .. ':status', r .. ':attempts', r .. ':next',
      r .. ':last_error')
    local s = d[1] or 'pending'
    attempts = attempts + (tonumber(d[2]) or 0)
    if s == 'pending' then
      local due = tonumber(d[3]) or tonumber(at)
      if due and (not next_at or due < next_at) then next_at = due end
    end
    if s ~= 'delivered' and not last_error and d[4] and d[4] ~= '' then
      last_error = d[4]
    end
  end
  return {f[1], text(attempts), text(next_at), text(last_error), text(eid), text(etype),
    text(at), text(f[3])}
end
local want_type, want_id = ARGV[1] or '', ARGV[2] or ''
local out = {}
for i, k in ipairs(KEYS) do
  local f = redis.call('HMGET', k, 'status', 'routes', 'origin')
  out[i] = false
  if f[1] then
    local eid, etype, at = hg_record_meta(k)
    if (want_type == '' or text(etype) == want_type) and (want_id == '' or text(eid) == want_id) then
      out[i] = row(k, f, eid, etype, at)
    end
  end
end
return out
