-- Hand the messages dead consumers hold in one route's work stream to the asking
-- consumer, already expired (`IDLE`), so that the next claim of any gateway takes
-- them back (`XAUTOCLAIM` in claim.lua) and leases them anew; a dead consumer left
-- with none is removed from the group.
-- KEYS: work:<route>. ARGV: group, the asking consumer, idle time to set (ms, more
-- than any lease), then the dead consumers.
-- Returns {how many messages were handed over, how many dead consumers still hold
-- some (the next pass goes on)}.
local work, group, taker, idle = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local BATCH = 100
local moved = 0
local unfinished = 0
for i = 4, #ARGV do
  local dead = ARGV[i]
  local done = false
  -- Bounded: at most this many batches per consumer and call; the next pass goes on.
  for _ = 1, 50 do
    local pending = redis.pcall('XPENDING', work, group, '-', '+', BATCH, dead)
    if type(pending) ~= 'table' or pending.err then
      done = true
      break
    end
    if #pending == 0 then
      done = true
      break
    end
    -- (`unpack` expands only as the last argument: the options go first.)
    local args = {'XCLAIM', work, group, taker, 0}
    for _, p in ipairs(pending) do args[#args + 1] = p[1] end
    args[#args + 1] = 'IDLE'
    args[#args + 1] = idle
    args[#args + 1] = 'JUSTID'
    redis.call(unpack(args))
    moved = moved + #pending
    if #pending < BATCH then
      done = true
      break
    end
  end
  if done then
    redis.pcall('XGROUP', 'DELCONSUMER', work, group, dead)
  else
    unfinished = unfinished + 1
  end
end
return {moved, unfinished}
