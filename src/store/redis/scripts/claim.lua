-- Claim up to `limit` deliveries of one route for one consumer, in one call (one
-- round trip, and with `appendfsync always` one fsync): take the messages whose
-- lease ran out from other consumers (`XAUTOCLAIM` with the lease as minimum idle
-- time: a crashed worker's deliveries are claimed again), move the route's due
-- retries from its schedule to its work stream, then read new messages
-- (`XREADGROUP >`), and take the lease of each message's delivery. The leases run
-- out first: one that ran out may let its ordering line go, and the new head is
-- then among the due ones moved.
-- KEYS: sched:<route>, work:<route>. ARGV: now, most retries moved, key base
-- (`hg:{src}:`), route, group, consumer, lease (ms), limit, lease token prefix. The
-- entry keys are derived from the base and share the source's hash tag.
-- Returns one {message id, entry id, lease token, entry hash} per claimed delivery.
--
-- Moving a retry: a delivery that is no longer pending (or an entry purged
-- meanwhile) just leaves the schedule; one discarded while a probe held it lets its
-- ordering line go.
-- Leasing: a message that no longer stands for pending work (the delivery ended,
-- the entry was purged, or a newer message replaced this one) is acknowledged and
-- deleted, and the claim reads on past it: such stale messages never take the
-- place of due work in a claim (at most `STALE_MAX` of them are passed over per
-- claim, which bounds the call; the next claim reads on). An absent `R:msg` means
-- no message stands for the delivery: it waits in `sched:R` (a retry, a release,
-- a replay, a probe's lease: see probe.lua) until a claim gives it one. A message
-- of a delivery discarded while leased whose holder died (its lease ran out, and a
-- claim took the message back) lets the delivery's ordering line go. A message of
-- an ordered delivery whose lease ran out while an earlier delivery of its key was
-- replayed into the line gives the head up to that one (`hg_line_keep`): it is
-- dropped, and the delivery waits in its line (its lease stays, for its holder's
-- completion, until another claim takes it).
-- A missing group (the route's first claim, or the first after Redis lost its data)
-- is created, with its stream, starting at the beginning of the stream: messages
-- written before it existed are read too.
local sched, work = KEYS[1], KEYS[2]
local now, base, route, group, consumer = ARGV[1], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local limit = tonumber(ARGV[8])
local p = route .. ':'
local STALE_MAX = 1000
-- When the leases taken now end (by the gateways' clock: what a replay or discard
-- asks to know whether a delivery is in flight; the stream's idle time decides
-- when a lease is taken back).
local lease_until = string.format('%d', tonumber(now) + tonumber(ARGV[7]))

local out = {}
local stale = 0

-- Lease the delivery message `mid` stands for (of entry `id`), or acknowledge and
-- delete the message when it stands for nothing.
local function take(mid, id)
  local ek = base .. 'e:' .. id
  -- The whole entry, read once: what decides the lease, and what the claim answers
  -- (without the lease it takes: the claim answers its token apart).
  local entry = redis.call('HGETALL', ek)
  local f = {}
  for i = 1, #entry, 2 do f[entry[i]] = entry[i + 1] end
  local rstatus, rmsg, okey = f[p .. 'status'] or 'pending', f[p .. 'msg'], f[p .. 'okey']
  local leased = false
  if f.status and rmsg == mid then
    if rstatus ~= 'pending' then
      if okey then hg_line_done(base, route, okey, id) end
    elseif okey and not hg_line_keep(base, route, okey, id) then
      -- Its lease stays: its holder may still complete it (`Queue::complete`).
      redis.call('HDEL', ek, p .. 'msg')
    else
      leased = true
    end
  end
  if leased then
    local token = ARGV[9] .. ':' .. (#out + 1)
    redis.call('HSET', ek, p .. 'lease', token, p .. 'lease_until', lease_until)
    out[#out + 1] = {mid, id, token, entry}
  else
    stale = stale + 1
    redis.call('XACK', work, group, mid)
    redis.call('XDEL', work, mid)
  end
end

-- Take each message of a stream reply.
local function take_all(list)
  for _, m in ipairs(list) do
    -- (Redis 6.2 answers a message deleted from the stream as nil.)
    if type(m) == 'table' and type(m[2]) == 'table' then
      local id = ''
      for i = 1, #m[2], 2 do
        if m[2][i] == 'id' then id = m[2][i + 1] end
      end
      take(m[1], id)
    end
  end
end

local function more()
  return #out < limit and stale < STALE_MAX
end

-- The leases that ran out. One call looks at the start of the pending list (the
-- oldest messages); the next call goes on from where it stopped only when stale
-- messages took places of this claim.
local cursor = '0-0'
repeat
  local before = stale
  local reclaimed = redis.pcall('XAUTOCLAIM', work, group, consumer, ARGV[7], cursor,
    'COUNT', limit - #out)
  if reclaimed.err then
    -- The only error XAUTOCLAIM can meet on this key: no group (and maybe no stream).
    redis.call('XGROUP', 'CREATE', work, group, '0', 'MKSTREAM')
    break
  end
  cursor = reclaimed[1]
  take_all(reclaimed[2])
until cursor == '0-0' or not more() or stale == before

local due = redis.call('ZRANGEBYSCORE', sched, '-inf', now, 'LIMIT', 0, ARGV[2])
for _, id in ipairs(due) do
  redis.call('ZREM', sched, id)
  local ek = base .. 'e:' .. id
  local f = redis.call('HMGET', ek, 'status', p .. 'status', p .. 'okey')
  if f[1] and (f[2] or 'pending') == 'pending' then
    local mid = redis.call('XADD', work, '*', 'id', id)
    redis.call('HSET', ek, p .. 'msg', mid)
  elseif f[3] then
    hg_line_done(base, route, f[3], id)
  end
end

-- New messages, until the claim is full or the stream has no more.
while more() do
  local want = limit - #out
  local read = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', want,
    'STREAMS', work, '>')
  if not read then break end
  local got = read[1][2]
  take_all(got)
  if #got < want then break end
end
return out
