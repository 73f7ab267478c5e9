-- Remove the entries of one retention index completed before a cutoff.
-- KEYS: done zset, the status sets of its entries (st:<a>, st:<b>). ARGV: cutoff, limit,
-- key base (`hg:{src}:`).
-- The per-entry keys are derived from the base; they share the source's hash tag.
-- Returns how many entries were removed.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('DEL', ARGV[3] .. 'e:' .. id, ARGV[3] .. 'a:' .. id, ARGV[3] .. 'audit:' .. id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
return #ids
