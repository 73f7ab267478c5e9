-- Reconciliation's lease and state of one source (`store::Reconciling`).
-- KEYS: the source's `reconcile` hash (fields `holder`, `until`, `state`).
-- ARGV: action (lease|save|release), holder, then for lease: now, until; for save:
-- now, state.
-- lease: takes the lease for the holder until `until`, unless another holder's
-- runs past now (the holder's own is renewed): {1, '1', state} when taken with a
-- state kept, {1, '0', ''} when taken before any, {0, holder, until} when held.
-- save: keeps the state if the holder's lease runs past now: 1 when kept, else 0.
-- release: ends the holder's lease, the state stays: 1 when it was the holder's,
-- else 0 (another's is left alone).
local action, holder = ARGV[1], ARGV[2]
local f = redis.call('HMGET', KEYS[1], 'holder', 'until')
local runs = function(now) return f[2] and tonumber(f[2]) > tonumber(now) end
if action == 'lease' then
  if f[1] and f[1] ~= holder and runs(ARGV[3]) then
    return {0, f[1], f[2]}
  end
  redis.call('HSET', KEYS[1], 'holder', holder, 'until', ARGV[4])
  local state = redis.call('HGET', KEYS[1], 'state')
  if state then return {1, '1', state} end
  return {1, '0', ''}
elseif action == 'save' then
  if f[1] == holder and runs(ARGV[3]) then
    redis.call('HSET', KEYS[1], 'state', ARGV[4])
    return 1
  end
  return 0
end
if f[1] == holder then
  redis.call('HDEL', KEYS[1], 'holder', 'until')
  return 1
end
return 0
