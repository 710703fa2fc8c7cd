-- One step of a running move task (atomq.platform.queues.move_tasks): moves up to ARGV[2] of
-- the source queue's ready messages (those in flight or waiting out a redelivery delay stay)
-- to the task's destination or back to the queue each one left as a dead letter (its
-- dead_letter_source), as ordinary messages without the record of that move
-- (without_dead_letter); the target's limits hold as for a dead letter's move (takes), and
-- its message_ttl_ms counts from the arrival.
-- KEYS[1..4]   doc, docp, docr, the source queue's cfg
-- KEYS[5..]    the source's destination (DEST_KEYS keys), then from KEYS[EXTRA] on:
-- KEYS[EXTRA]     the tenant's usage hash
-- KEYS[EXTRA + 1] the tenant's move tasks (hash: id -> record, src:<queue> -> the id running from it)
-- KEYS[EXTRA + 2] the tenant's move tasks due (sorted set id -> ms)
-- KEYS[EXTRA + 3..] a target's keys (dead_letter_targets.target_keys), when ARGV[3] names one
-- ARGV[1]      the task's id
-- ARGV[2]      most messages this call moves
-- ARGV[3]      the target the caller passed the keys of ('' for none)
-- ARGV[4]      when the task is due again after this step, in ms from now
-- The source counts what left it in its cfg's n:moved (counters.QUEUE_COUNTS).
-- Returns {moved, status, target}: the task's status after the call (running, completed,
-- cancelled or failed); target, when the call stopped at a message for another target than
-- the one it was given: the caller calls again with that one's keys. A running task stopped
-- by a full target is due again after ARGV[4], and tries again then.
-- The task completes when the source has no waiting message left; it fails (record: failure,
-- failed_on) when the source or a target no longer exists or is not a point-to-point queue
-- (no_queue), a message has no queue to go back to (no_source), or a target holds a copy of
-- the message already (holds_copy).

local MOVES, DUE = KEYS[EXTRA + 1], KEYS[EXTRA + 2]
local text = redis.call('HGET', MOVES, ARGV[1])
if not text then
  redis.call('ZREM', DUE, ARGV[1])
  return {0, 'gone', ''}
end
local rec = cjson.decode(text)
if rec['status'] ~= 'running' then
  redis.call('ZREM', DUE, ARGV[1])
  return {0, rec['status'], ''}
end
local usage = KEYS[EXTRA]
local d = dest_at(5)
local given = ARGV[3]
local t = nil
if given ~= '' then t = target_at(EXTRA + 3, given) end

local function finish(status, failure, failed_on)
  rec['status'] = status
  if failure then
    rec['failure'], rec['failed_on'] = failure, failed_on
  end
  redis.call('HDEL', MOVES, 'src:' .. rec['source'])
  redis.call('ZREM', DUE, ARGV[1])
end

-- The next waiting message: the older of the stream's first entry and rz's first member.
local function head()
  local e = redis.call('XRANGE', d.ready, '-', '+', 'COUNT', 1)
  local z = redis.call('ZRANGE', d.rz, 0, 0)
  if #e > 0 and (#z == 0 or send_order(e[1][2][2]) < send_order(z[1])) then
    return e[1][2][2], 'r' .. e[1][1]
  end
  if #z > 0 then return z[1], 'z' end
  return nil
end

-- Moves the oldest waiting message; returns 'moved', 'skipped' (an entry of a message gone
-- meanwhile, dropped as a get drops it), or 'stop' (the step ends; need names another target).
local need = ''
local function move_one()
  local id, where = head()
  if not id then
    finish('completed')
    return 'stop'
  end
  local s = redis.call('HGET', d.state, id)
  local env = redis.call('HGET', d.msg, id)
  if not s or not env or select(3, parse_state(s)) ~= where then
    unlink(d, id, where)
    return 'skipped'
  end
  local json = string.sub(env, string.find(env, '|', 1, true) + 1)
  local to = rec['destination']
  if to == cjson.null then
    local ok, parsed = pcall(cjson.decode, json)
    local dl = ok and type(parsed) == 'table' and parsed['dl']
    to = type(dl) == 'table' and type(dl[2]) == 'string' and dl[2] or nil
    if not to then
      finish('failed', 'no_source', id)
      return 'stop'
    end
  end
  if to ~= given then
    need = to
    return 'stop'
  end
  local c = redis.call('HMGET', t.cfg, 'model', 'lv', 'max_messages', 'max_bytes', 'max_message_bytes', 'gen',
                       'message_ttl_ms', 'ordering')
  if c[1] ~= 'point_to_point' or c[2] == '1' or t.cfg == CFG then
    finish('failed', 'no_queue', to)
    return 'stop'
  end
  if redis.call('HEXISTS', t.d.state, id) == 1 then
    finish('failed', 'holds_copy', id)
    return 'stop'
  end
  local ndocs, priority = env_head(env)
  local ttl = tonumber(c[7] or '0')
  local landed = make_head(ndocs, priority, ttl > 0 and now_ms() + ttl or nil) .. '|' .. without_dead_letter(json)
  local bytes = message_bytes(d, id)
  local size = bytes - #env + #landed
  if not takes(t, c, id, size) then return 'stop' end  -- full: the next step tries again
  unlink(d, id, where)
  local freed = lift(d, id, bytes)
  land(t, id, landed, size, c[8] == 'group')
  redis.call('HINCRBY', usage, 'bytes', #landed - #env - freed)
  return 'moved'
end

local moved = 0
if not redis.call('HGET', CFG, 'model') then
  finish('failed', 'no_queue', rec['source'])
else
  local most = tonumber(ARGV[2])
  for _ = 1, 2 * most do
    local done = move_one()
    if done == 'moved' then moved = moved + 1 end
    if done == 'stop' or moved >= most then break end
  end
  if moved > 0 then redis.call('HINCRBY', CFG, 'n:moved', moved) end
end
rec['moved'] = rec['moved'] + moved
if rec['status'] == 'running' and need == '' then
  redis.call('ZADD', DUE, now_ms() + tonumber(ARGV[4]), ARGV[1])
end
redis.call('HSET', MOVES, ARGV[1], cjson.encode(rec))
return {moved, rec['status'], need}
