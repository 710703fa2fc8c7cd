-- Changes a listener's state, or removes it.
-- KEYS[1..5]   definitions, stat, exec, pending, done (the listener's keys)
-- KEYS[6]      the tenant's count of Spark listeners (a delete lowers it)
-- ARGV[1]      the listener's name
-- ARGV[2]      pause | resume | restart | delete
-- pause: no new execution starts (running ones finish); resume: executions
-- start again; restart: resume, clear the last error, and free the slots of
-- the executions it waits for (a stuck one's later finish still acks). A
-- listener waiting for a worker of its engine goes on waiting after a resume
-- or restart: the next supervision round says so again.
-- Returns 1, or the error NOLISTENER.

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return redis.error_reply('NOLISTENER')
end
local action = ARGV[2]
if action == 'delete' then
  local definition = cjson.decode(redis.call('HGET', KEYS[1], ARGV[1]))
  if definition.engine == 'spark' and tonumber(redis.call('GET', KEYS[6]) or '0') > 0 then
    redis.call('DECR', KEYS[6])
  end
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
elseif action == 'pause' then
  redis.call('HSET', KEYS[2], 'state', 'paused')
elseif action == 'resume' then
  local state = redis.call('HGET', KEYS[2], 'state')
  if state == 'paused' then redis.call('HSET', KEYS[2], 'state', 'running') end
elseif action == 'restart' then
  redis.call('HSET', KEYS[2], 'state', 'running', 'last_error', '')
  redis.call('DEL', KEYS[3], KEYS[4])
end
return 1
