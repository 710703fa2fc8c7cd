-- Cancels a running move task (atomq.platform.queues.move_tasks): no message moves after it.
-- KEYS[1]      the tenant's move tasks (hash: id -> record, src:<queue> -> the id running from it)
-- KEYS[2]      the tenant's move tasks due (sorted set id -> ms)
-- ARGV[1]      the task's id
-- Returns {1, the task's record (JSON) after the call}, or {0, its record} when it had finished
-- before; error NOTASK when there is no such task.

local text = redis.call('HGET', KEYS[1], ARGV[1])
if not text then return redis.error_reply('NOTASK no such move task') end
local rec = cjson.decode(text)
if rec['status'] ~= 'running' then return {0, text} end
rec['status'] = 'cancelled'
text = cjson.encode(rec)
redis.call('HSET', KEYS[1], ARGV[1], text)
redis.call('HDEL', KEYS[1], 'src:' .. rec['source'])
redis.call('ZREM', KEYS[2], ARGV[1])
return {1, text}
