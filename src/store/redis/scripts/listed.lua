-- What a listing shows of entries (no headers, no body).
-- KEYS: entry keys of one source.
-- Returns per key false (gone) or {status, attempts, next_attempt_at, last_error,
-- event_id, event_type, received_at}, all text ('' when absent).
-- The event id and type of an entry sit in the metadata line of its packed record,
-- in front of the body; a hash field cannot be read in part, so the script takes
-- the record and returns only what it needs from that line: the body costs Redis a
-- copy inside the script, never the network or the gateway's memory. (Keeping the
-- summary in a field of its own would cost every accept, the hot path, instead.)
local function text(v)
  if type(v) == 'string' then return v end
  if type(v) == 'number' then return string.format('%.0f', v) end
  return ''
end
local out = {}
for i, k in ipairs(KEYS) do
  local f = redis.call('HMGET', k, 'status', 'attempts', 'next_attempt_at', 'last_error')
  if not f[1] then
    out[i] = false
  else
    local eid, etype, at
    local record = redis.call('HGET', k, 'record')
    local nl = record and string.find(record, '\n', 1, true)
    if nl then
      local ok, meta = pcall(cjson.decode, string.sub(record, 1, nl - 1))
      if ok and type(meta) == 'table' then
        eid, etype, at = meta.event_id, meta.event_type, meta.received_at
      end
    end
    record = nil
    out[i] = {f[1], text(f[2]), text(f[3]), text(f[4]), text(eid), text(etype), text(at)}
  end
end
return out
