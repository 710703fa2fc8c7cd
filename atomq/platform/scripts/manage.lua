-- Management actions on selected messages, or on one bounded chunk of all of them.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5..]    the destination (DEST_KEYS keys), then from KEYS[EXTRA] on:
-- KEYS[EXTRA]     the tenant's usage hash
-- KEYS[EXTRA + 1] this call's record: what it did, "<count>,<cursor>"
-- ARGV[1]      action: delete (queued messages) | delete_dead | resend (dead letters)
--              | drop (any message: queue and subscriber removal, retention purge)
-- ARGV[2]      mode: ids | chunk | older (drop messages sent before ARGV[3] ms)
--              | reason (the dead letters given the reason ARGV[5], in the order they died)
-- ARGV[3]      chunk: cursor (last id of the previous chunk, or "") | older: cut-off ms
--              | reason: cursor (last dead letter queue entry of the previous chunk, or "")
-- ARGV[4]      chunk size (chunk, older and reason modes)
-- ARGV[5]      how long the record is kept, in ms
-- ARGV[6..]    message ids (ids mode) | the reason (reason mode)
-- Does not require the queue's config: removal runs after the queue is gone.
-- Returns {count, cursor}; cursor is "" when the chunk reached the end.
-- A call whose record exists ran before (the store's client sent it again after a
-- time-out): it changes nothing and answers what it answered then.

local RECORD = KEYS[EXTRA + 1]
local held = redis.call('GET', RECORD)
if held then
  local comma = string.find(held, ',', 1, true)
  return {tonumber(string.sub(held, 1, comma - 1)), string.sub(held, comma + 1)}
end

local function manage()
  local d = dest_at(5)
  local action, mode = ARGV[1], ARGV[2]
  local ids, cursor = {}, ''
  if mode == 'ids' then
    local seen = {}
    for i = 6, #ARGV do
      if not seen[ARGV[i]] then
        seen[ARGV[i]] = true
        ids[#ids + 1] = ARGV[i]
      end
    end
  elseif mode == 'reason' then
    local size = tonumber(ARGV[4])
    local start = '-'
    if ARGV[3] ~= '' then start = '(' .. ARGV[3] end
    local entries = redis.call('XRANGE', d.dlq, start, '+', 'COUNT', size)
    for _, e in ipairs(entries) do
      local id, reason = dead_letter_fields(e[2])
      if id and reason == ARGV[6] then ids[#ids + 1] = id end
    end
    if #entries == size then cursor = entries[#entries][1] end
  else
    local size = tonumber(ARGV[4])
    local start, stop = '-', '+'
    if mode == 'chunk' and ARGV[3] ~= '' then start = '(' .. ARGV[3] end
    if mode == 'older' then stop = '(' .. ARGV[3] end
    ids = redis.call('ZRANGE', d.all, start, stop, 'BYLEX', 'LIMIT', 0, size)
    if #ids == size then cursor = ids[#ids] end
  end

  local count, gone, gone_dead, reasons = 0, {}, {}, 0
  if #ids == 0 then return {0, cursor} end
  -- A dead letter resent to a group-ordered queue waits behind its group's head, if one is out.
  local grouped = action == 'resend' and redis.call('HGET', CFG, 'ordering') == 'group'
  local states = hmget_batched(d.state, ids)
  for i, id in ipairs(ids) do
    local s = states[i]
    if s then
      local dc, _, where = parse_state(s)
      local dead = string.sub(where, 1, 1) == 'd'
      if action == 'drop' or (action == 'delete' and not dead) or (action == 'delete_dead' and dead) then
        if dead then
          reasons = reasons + #dead_reason(d, where)
          gone_dead[#gone_dead + 1] = id
        else
          gone[#gone + 1] = id
        end
        unlink(d, id, where)
        count = count + 1
      elseif action == 'resend' and dead then
        reasons = reasons + #dead_reason(d, where)
        unlink(d, id, where)
        drop_expiry(d, id, KEYS[EXTRA])
        redis.call('INCRBY', d.held, message_bytes(d, id))
        local group = grouped and group_of(redis.call('HGET', d.msg, id))
        local place = string.match(id, '%-(%d+)$')  -- its send's
        if group and group_waits(d, group, id, place) then
          redis.call('HSET', d.state, id, fmt_state(dc, 0, 'w' .. place))
        else
          make_ready(d, id, dc, 0)
        end
        local mark = redis.call('HGET', d.lv, 'i:' .. id)
        if mark then last_value_arrives(d, id, string.sub(mark, 2), KEYS[EXTRA], CFG) end
        count = count + 1
      end
    end
  end
  if action == 'resend' then
    if reasons > 0 then redis.call('HINCRBY', KEYS[EXTRA], 'bytes', -reasons) end
  else
    forget(d, gone, KEYS[EXTRA], 0, false)
    forget(d, gone_dead, KEYS[EXTRA], reasons, true)
  end
  return {count, cursor}
end

local reply = manage()
if reply[1] > 0 then redis.call('SET', RECORD, reply[1] .. ',' .. reply[2], 'PX', tonumber(ARGV[5])) end
return reply
