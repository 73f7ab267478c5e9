-- Migration to routes, the queues of one source: the work stream and the retry
-- schedule of the layout before routes become those of the default route.
-- KEYS: work, work:default, sched, sched:default. ARGV: none.
-- RENAME keeps a stream's consumer group, with the messages its consumers read and
-- never acknowledged. A queue is renamed only while the new name is free (a second
-- run, or another gateway's, finds nothing left to do).
-- Returns {queues renamed, queues left beside a new one of the same name}.
local renamed, left = 0, 0
for i = 1, 3, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    if redis.call('EXISTS', KEYS[i + 1]) == 0 then
      redis.call('RENAME', KEYS[i], KEYS[i + 1])
      renamed = renamed + 1
    else
      left = left + 1
    end
  end
end
return {renamed, left}
