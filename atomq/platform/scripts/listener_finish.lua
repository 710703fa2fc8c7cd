-- An execution ends: its counts, its slot, and on success the messages it
-- processed enter the listener's window of processed messages, before the
-- caller acks them (a redelivery of one that was processed but not acked is
-- then recognised and not processed again).
-- KEYS[1..5]   definitions, stat, exec, pending, done (the listener's keys)
-- ARGV[1]      the listener's name
-- ARGV[2]      the execution id
-- ARGV[3]      ok | failed | deferred | empty (it found no message: only its slot is freed)
-- ARGV[4]      the error (failed, deferred)
-- ARGV[5]      deferred: ms before the listener's next execution (it backs off)
-- ARGV[6]      how long (ms) processed message ids are kept
-- ARGV[7]      most processed message ids kept
-- ARGV[8..]    the ids of the messages it processed (succeeded)
-- Returns 1 when the listener was waiting for this execution, else 0 (its
-- counts then stay as they are; the caller still settles the messages).

local RECENT_FAILURES = 10  -- as atomq.platform.listeners.deployed.RECENT_FAILURES

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('ZREM', KEYS[3], ARGV[2]) == 0 then return 0 end
redis.call('SREM', KEYS[4], ARGV[2])
if ARGV[3] == 'empty' then return 1 end
redis.call('HINCRBY', KEYS[2], 'executions', 1)
local state = redis.call('HGET', KEYS[2], 'state')
local now = now_ms()
-- Rings of 10-second buckets of executions (e) and failed ones (f), as a queue's of sends and acks:
-- what the listener's page charts (atomq.platform.watch.counters.read_ring).
count_rate('e', 1, now, KEYS[2])
if ARGV[3] ~= 'ok' then count_rate('f', 1, now, KEYS[2]) end
if ARGV[3] == 'ok' then
  for i = 8, #ARGV do redis.call('ZADD', KEYS[5], now, ARGV[i]) end
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - tonumber(ARGV[6]))
  redis.call('ZREMRANGEBYRANK', KEYS[5], 0, -tonumber(ARGV[7]) - 1)
  if state == 'error' then redis.call('HSET', KEYS[2], 'state', 'running') end
else
  local failures = redis.call('HINCRBY', KEYS[2], 'failures', 1)
  redis.call('HSET', KEYS[2], 'last_error', ARGV[4])
  -- The last RECENT_FAILURES failures, a field each in a ring: x:<slot> = "<number>|<ms>|<error>".
  redis.call('HSET', KEYS[2], 'x:' .. (failures % RECENT_FAILURES),
             failures .. '|' .. now .. '|' .. string.sub(ARGV[4], 1, 2000))
  if state == 'running' then redis.call('HSET', KEYS[2], 'state', 'error') end
  if ARGV[3] == 'deferred' then
    redis.call('HSET', KEYS[2], 'retry_at', now + tonumber(ARGV[5]))
  end
end
return 1
