-- One supervision round of a listener: fails the started executions that
-- outlived their deadline (and drops the ones rq never started), then
-- schedules as many new ones as its ready messages need and its free slots
-- allow. Messages whose redelivery is due count as ready; deliveries past
-- their ack time-out do not (the sweep schedules them first).
-- KEYS[1..5]   definitions, stat, exec, pending, done (the listener's keys)
-- KEYS[6..8]   the destination's ready stream, redelivery schedule and ordered ready set
-- ARGV[1]      the listener's name
-- ARGV[2]      batch size
-- ARGV[3]      most executions at once (the listener's max, or the cap on unlimited)
-- ARGV[4]      deadline (ms from now) for a scheduled execution to start
-- ARGV[5]      prefix of the new executions' ids: the i-th is the prefix and i (4 digits)
-- ARGV[6]      why no worker of the listener's engine is alive, or '' when one is: a
--              running (or failed) listener then waits, with this as its last error; a
--              waiting one runs again once a worker is alive. Executions are scheduled
--              either way: their jobs wait in rq for the first worker.
-- Returns {scheduled count, lost count}.

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {0, 0} end
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 1000)
local state = redis.call('HGET', KEYS[2], 'state')
local lost = 0
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[3], id)
  -- One that never started took no messages: rq dropped it, nothing failed.
  if redis.call('SREM', KEYS[4], id) == 0 then lost = lost + 1 end
end
if lost > 0 then
  redis.call('HINCRBY', KEYS[2], 'executions', lost)
  redis.call('HINCRBY', KEYS[2], 'failures', lost)
  redis.call('HSET', KEYS[2], 'last_error',
    'an execution did not finish (its work horse died or ran out of time); '
    .. 'its messages come back after their ack time-out')
  if state == 'running' then
    state = 'error'
    redis.call('HSET', KEYS[2], 'state', 'error')
  end
end
-- A listener that waits keeps the state and error it had before (waited_from,
-- waited_error) and gets them back once a worker is alive: an execution's
-- failure is not lost to a spell without workers.
local waiting = ARGV[6]
if waiting ~= '' and (state == 'running' or state == 'error') then
  redis.call('HSET', KEYS[2], 'waited_from', state,
             'waited_error', redis.call('HGET', KEYS[2], 'last_error') or '')
  state = 'waiting'
  redis.call('HSET', KEYS[2], 'state', 'waiting', 'last_error', waiting)
elseif waiting ~= '' and state == 'waiting' and redis.call('HGET', KEYS[2], 'last_error') ~= waiting then
  redis.call('HSET', KEYS[2], 'last_error', waiting)
elseif waiting == '' and state == 'waiting' then
  local before = redis.call('HMGET', KEYS[2], 'waited_from', 'waited_error')
  state = before[1] or 'running'
  redis.call('HSET', KEYS[2], 'state', state, 'last_error', before[2] or '')
  redis.call('HDEL', KEYS[2], 'waited_from', 'waited_error')
end
if state == 'paused' then return {0, lost} end
local retry_at = tonumber(redis.call('HGET', KEYS[2], 'retry_at'))
if retry_at and now < retry_at then return {0, lost} end

local ready = redis.call('XLEN', KEYS[6]) + redis.call('ZCOUNT', KEYS[7], '-inf', now) + redis.call('ZCARD', KEYS[8])
local batch = tonumber(ARGV[2])
local wanted = math.ceil(ready / batch) - redis.call('SCARD', KEYS[4])
local free = tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[3])
local n = math.min(wanted, free)
if n <= 0 then return {0, lost} end
local deadline = now + tonumber(ARGV[4])
for i = 0, n - 1 do
  local id = ARGV[5] .. string.format('%04d', i)
  redis.call('ZADD', KEYS[3], deadline, id)
  redis.call('SADD', KEYS[4], id)
end
return {n, lost}
