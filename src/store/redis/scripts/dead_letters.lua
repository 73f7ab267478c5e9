-- What the dead-letter view shows of dead deliveries through one route (no
-- headers, no body).
-- KEYS: entry keys of one source. ARGV: the route.
-- Returns per key false (gone) or {event_id, event_type, received_at, dead_at,
-- attempts, last_error, last_failure}, all text ('' when absent). `dead_at` is `R:dead_at`, which
-- the complete script sets; a delivery that went dead before it existed answers the
-- entry's `updated_at`. The event id and type are read from the record's metadata
-- line (`hg_record_meta`).
local function text(v)
  if type(v) == 'string' then return v end
  if type(v) == 'number' then return string.format('%.0f', v) end
  return ''
end
local p = ARGV[1] .. ':'
local out = {}
for i, k in ipairs(KEYS) do
  local f = redis.call('HMGET', k, 'status', p .. 'dead_at', 'updated_at', p .. 'attempts',
    p .. 'last_error', p .. 'last_failure')
  if not f[1] then
    out[i] = false
  else
    local eid, etype, at = hg_record_meta(k)
    out[i] = {text(eid), text(etype), text(at), text(f[2] or f[3] or at), text(f[4]),
      text(f[5]), text(f[6])}
  end
end
return out
