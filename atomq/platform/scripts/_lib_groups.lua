-- Shared prelude, part 2 of 7 (atomq.platform.scripts.LIB_PARTS): Message groups: one message of a group out at a time, its next waiting behind it.
-- On a queue with ordering "group" each group has at most one message out (ready, in flight or
-- waiting out a redelivery delay): its head, which grp names (group -> id). The group's later
-- messages wait in gw (state w<place>) in the order they arrived: by send order, a delayed copy
-- when its delay ran out (it takes a sequence number then: see arrive). The next becomes the
-- head, ready at its place, when the head leaves for good (acked, dead-lettered, expired,
-- dropped or superseded).
-- A get thus sees heads only (and the messages of no group) and needs no rule of its own: a
-- nacked head comes back before its group's next, and its redelivery delay holds the group.
-- Whether a queue is grouped matters only where a message arrives; what leaves follows grp,
-- so the groups of a queue whose ordering changed drain as they are.

-- Whether message `id` of `group`, arriving in destination d at place `seq` (text: its send's
-- sequence number, or a delayed copy's when it fell due), waits behind its group's head: it then
-- joins gw, and the caller gives it state w<seq>; else it is the group's head from now on, and
-- the caller makes it ready.
local function group_waits(d, group, id, seq)
  local head = redis.call('HGET', d.grp, group)
  if head and head ~= id then
    redis.call('ZADD', d.gw, 0, group_member(group, seq, id))
    return true
  end
  redis.call('HSET', d.grp, group, id)
  return false
end

-- Messages `ids` (envelopes `envs`, in order; nil: read here) leave destination d for good: a
-- group's head that leaves makes way for the group's next, or ends the group's entry when none
-- waits. A message that waited left gw by unlink, before. Costs one EXISTS where no group has a
-- message out.
local function groups_leave(d, ids, envs)
  if redis.call('EXISTS', d.grp) == 0 then return end
  envs = envs or hmget_batched(d.msg, ids)
  for i, id in ipairs(ids) do
    local group = group_of(envs[i])
    if group and redis.call('HGET', d.grp, group) == id then
      local first = redis.call('ZRANGEBYLEX', d.gw, '[' .. group .. '\0', '(' .. group .. '\1', 'LIMIT', 0, 1)
      if #first > 0 then
        -- "<group>\0<16-digit place>|<id>": ready at that place among the others of its priority.
        redis.call('ZREM', d.gw, first[1])
        local place = string.match(string.sub(first[1], #group + 2, #group + 17), '^0*(%d+)$')
        local next_id = string.sub(first[1], #group + 19)
        redis.call('HSET', d.grp, group, next_id)
        local dc, fails = parse_state(redis.call('HGET', d.state, next_id))
        local _, priority = env_head(redis.call('HGET', d.msg, next_id))
        redis.call('ZADD', d.rz, seq_score(priority, place), next_id)
        redis.call('HSET', d.state, next_id, fmt_state(dc, fails, 'z'))
        wake(d)
      else
        redis.call('HDEL', d.grp, group)
      end
    end
  end
end

