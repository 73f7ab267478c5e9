-- Keep a secret a provider established in a handshake, if the source's handshake
-- is armed and the handshake presented its arming's token, disarming it in the
-- same step (store::secrets).
-- KEYS: the source's arming (a hash: until, unix ms; token_hash, the SHA-256 of
--       its token), its secrets (a hash: id -> record).
-- ARGV: now (unix ms), the presented token's hash, the secret's id, its record,
--       most secrets kept.
-- Returns {1, the record kept} (new, or the same secret kept before), {0, ''} when
-- the handshake is not armed, {-2, ''} when the token is not the arming's, {-1, ''}
-- when the source keeps the most secrets already (in both, the handshake stays
-- armed).
local armed = redis.call('HMGET', KEYS[1], 'until', 'token_hash')
local untl = tonumber(armed[1] or '')
if not untl or untl <= tonumber(ARGV[1]) then return {0, ''} end
if armed[2] ~= ARGV[2] then return {-2, ''} end
local kept = redis.call('HGET', KEYS[2], ARGV[3])
if not kept then
  if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[5]) then return {-1, ''} end
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
  kept = ARGV[4]
end
redis.call('DEL', KEYS[1])
return {1, kept}
