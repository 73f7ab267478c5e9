-- Keep a secret a provider established in a handshake, if the source's handshake
-- is armed, disarming it in the same step (store::secrets).
-- KEYS: the source's armed handshake (until when, unix ms), its secrets (a hash:
--       id -> record).
-- ARGV: now (unix ms), the secret's id, its record, most secrets kept.
-- Returns {1, the record kept} (new, or the same secret kept before), {0, ''} when
-- the handshake is not armed, {-1, ''} when the source keeps the most secrets
-- already (the handshake stays armed).
local untl = tonumber(redis.call('GET', KEYS[1]) or '')
if not untl or untl <= tonumber(ARGV[1]) then return {0, ''} end
local kept = redis.call('HGET', KEYS[2], ARGV[2])
if not kept then
  if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[4]) then return {-1, ''} end
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  kept = ARGV[3]
end
redis.call('DEL', KEYS[1])
return {1, kept}
