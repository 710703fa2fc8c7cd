-- A work horse starts a scheduled execution: it runs only if the listener
-- still waits for it, it has not started before, and the listener is not paused.
-- KEYS[1..5]   definitions, stat, exec, pending, done (the listener's keys)
-- ARGV[1]      the listener's name
-- ARGV[2]      the execution id
-- ARGV[3]      time (ms from now) the execution may run before it counts as lost
-- Returns 1 when the execution may run, 0 when it must not (paused, restarted,
-- lost, deleted or started already; a paused listener's scheduled executions
-- are dropped).

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if not redis.call('ZSCORE', KEYS[3], ARGV[2]) then return 0 end
if redis.call('SREM', KEYS[4], ARGV[2]) == 0 then return 0 end
if redis.call('HGET', KEYS[2], 'state') == 'paused' then
  redis.call('ZREM', KEYS[3], ARGV[2])
  return 0
end
redis.call('ZADD', KEYS[3], now_ms() + tonumber(ARGV[3]), ARGV[2])
return 1
