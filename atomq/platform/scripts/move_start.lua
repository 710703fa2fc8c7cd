-- Starts a move task (atomq.platform.queues.move_tasks): from now on the maintenance moves the
-- source queue's waiting messages, a few each step (move_step.lua), to a destination queue or
-- back to the queue each one was dead-lettered from.
-- KEYS[1..4]   doc, docp, docr, the source queue's cfg
-- KEYS[5]      the source's ready stream
-- KEYS[6]      the source's ordered ready set (rz)
-- KEYS[7]      the tenant's move tasks (hash: id -> record, src:<queue> -> the id running from it)
-- KEYS[8]      the tenant's move tasks due (sorted set id -> ms)
-- ARGV[1]      the task's id
-- ARGV[2]      the source's name
-- ARGV[3]      the destination's name ('': each message's dead_letter_source)
-- ARGV[4]      most messages a second (0: as many as a maintenance step moves)
-- ARGV[5]      how many finished tasks of the source are kept, the newest (older ones go)
-- Returns the task's record (JSON); error NOQUEUE when the source does not exist, MOVEBUSY <id>
-- when a task of the source is running.

local q = require_queue()
if q.err then return q end
local moves, due = KEYS[7], KEYS[8]
local source = ARGV[2]
local running = redis.call('HGET', moves, 'src:' .. source)
if running then return redis.error_reply('MOVEBUSY ' .. running) end
local finished = {}
local all = redis.call('HGETALL', moves)
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 4) ~= 'src:' then
    local ok, rec = pcall(cjson.decode, all[i + 1])
    if ok and type(rec) == 'table' and rec['source'] == source then
      finished[#finished + 1] = {id = all[i], started = tonumber(rec['started']) or 0}
    end
  end
end
table.sort(finished, function(a, b) return a.started > b.started end)
for i = tonumber(ARGV[5]), #finished do redis.call('HDEL', moves, finished[i].id) end
local now = now_ms()
local rec = {id = ARGV[1], source = source, destination = ARGV[3] ~= '' and ARGV[3] or cjson.null,
             rate = tonumber(ARGV[4]) > 0 and tonumber(ARGV[4]) or cjson.null, status = 'running', moved = 0,
             to_move = redis.call('XLEN', KEYS[5]) + redis.call('ZCARD', KEYS[6]), started = now,
             failure = cjson.null, failed_on = cjson.null}
local text = cjson.encode(rec)
redis.call('HSET', moves, ARGV[1], text, 'src:' .. source, ARGV[1])
redis.call('ZADD', due, now, ARGV[1])
return text
