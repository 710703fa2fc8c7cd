-- Shared prelude, part 5 of 7 (atomq.platform.scripts.LIB_PARTS): Exclusive queues: consumers, their turns, and delivery in send order.
-- Exclusive queues. Every get, ack, nack, extend or release names its
-- consumer; the consumer that asked first among those still calling is
-- active and alone gets messages and settles them. One that makes no call for
-- the queue's ack time-out loses its place; if it was active, the messages it
-- held come back at their place, as redeliveries that do not count as
-- failed deliveries, and the standby that asked first takes over.

-- The messages in flight come back as if never delivered this time (a
-- superseded last value is dropped, an expired one expires).
local function hand_back(d, q, now, usage)
  local held = redis.call('ZRANGE', d.inflight, 0, -1)
  for _, id in ipairs(held) do
    local dc, fails = parse_state(redis.call('HGET', d.state, id))
    if superseded_in_flight(d, id) then
      drop_superseded(d, id, usage)
    elseif expired_by(d, id, now) then
      expire(d, q, id, dc, fails, 'f', usage)
    else
      redis.call('ZREM', d.inflight, id)
      make_ready(d, id, dc, fails)
    end
  end
  return #held
end

-- Drops the consumers that went silent (handing back what the active one
-- held), and makes the one that asked first among the others active if none
-- is. Returns the active consumer's name, or nil when there is none.
local function expire_consumers(d, q, now, usage)
  local all = redis.call('HGETALL', d.cons)
  local active, firsts, gone = nil, {}, {}
  for i = 1, #all, 2 do
    if all[i] == '#active' then
      active = all[i + 1]
    else
      local first, last = string.match(all[i + 1], '^(%d+)|(%d+)$')
      if tonumber(last) + q.ack_timeout_ms <= now then
        gone[#gone + 1] = all[i]
      else
        firsts[all[i]] = tonumber(first)
      end
    end
  end
  if #gone > 0 then redis.call('HDEL', d.cons, unpack(gone)) end
  if active and not firsts[active] then
    active = nil
    hand_back(d, q, now, usage)
  end
  if not active then
    for name, first in pairs(firsts) do
      if not active or first < firsts[active] or (first == firsts[active] and name < active) then
        active = name
      end
    end
    if active then
      redis.call('HSET', d.cons, '#active', active)
    else
      redis.call('HDEL', d.cons, '#active')
    end
  end
  return active
end

-- A call of consumer `name` on an exclusive queue (after expire_consumers):
-- records it, at the end of the line when it is new (at most `most`
-- consumers). Returns whether it is the active one, or an error reply.
local function consumer_calls(d, name, now, most, active)
  local seen = redis.call('HGET', d.cons, name)
  local first = seen and string.match(seen, '^(%d+)|') or nil
  if not first then
    if redis.call('HLEN', d.cons) - (active and 1 or 0) >= most then
      return redis.error_reply('TOOMANYCONSUMERS the queue has its most consumers')
    end
    first = now
  end
  redis.call('HSET', d.cons, name, first .. '|' .. now)
  if not active then
    redis.call('HSET', d.cons, '#active', name)
    return true
  end
  return active == name
end

-- A consumer's call on a queue, after sweep_destination (which dropped the
-- consumers that went silent and named the active one): on an exclusive queue
-- the consumer is required, recorded, and active or not; on another it is
-- ignored (true).
local function consumer_turn(d, q, name, now, most)
  if not q.exclusive then return true end
  if name == '' then
    return redis.error_reply('NOCONSUMER an exclusive queue needs the consumer of every call')
  end
  return consumer_calls(d, name, now, most, redis.call('HGET', d.cons, '#active') or nil)
end

-- The first `max` messages of rz in send order, whatever their priority (an
-- exclusive queue's order), as {id, score, ...} scored as if they all had the
-- default priority, so that a get merges them with the stream by send order.
-- One range read a priority band: rz is ordered by priority first.
local function in_send_order(d, max)
  if redis.call('ZCARD', d.rz) == 0 then return {} end
  local found = {}
  for band = 0, 9 do
    local part = redis.call('ZRANGEBYSCORE', d.rz, band .. string.rep('0', 13), band .. string.rep('9', 13),
                            'LIMIT', 0, max)
    for _, id in ipairs(part) do found[#found + 1] = id end
  end
  local seq = {}
  for _, id in ipairs(found) do seq[id] = send_order(id) end
  table.sort(found, function(a, b) return seq[a] < seq[b] end)
  local out = {}
  for i = 1, math.min(max, #found) do
    out[#out + 1] = found[i]
    out[#out + 1] = ready_score(DEFAULT_PRIORITY, found[i])
  end
  return out
end

-- The send order before which an exclusive queue delivers while a message
-- waits out a redelivery delay (nothing sent after it goes before it): that
-- message's sequence number, or nil when none waits.
local function order_barrier(d, q)
  if not q.exclusive then return nil end
  local least
  for _, id in ipairs(redis.call('ZRANGE', d.sched, 0, -1)) do
    local s = send_order(id)
    if not least or s < least then least = s end
  end
  return least
end
