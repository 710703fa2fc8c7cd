-- Shared prelude, part 4 of 7 (atomq.platform.scripts.LIB_PARTS): Dead letters, expiry and failed deliveries.
-- The message id and reason of a dead letter queue entry's fields (m, r, f).
local function dead_letter_fields(f)
  local id, reason
  for k = 1, #f, 2 do
    if f[k] == 'm' then id = f[k + 1] elseif f[k] == 'r' then reason = f[k + 1] end
  end
  return id, reason
end

-- The reason a dead letter was given (`where` is its state's d<entry>).
local function dead_reason(d, where)
  local entry = string.sub(where, 2)
  local rec = redis.call('XRANGE', d.dlq, entry, entry)
  if #rec > 0 then
    local _, reason = dead_letter_fields(rec[1][2])
    return reason or ''
  end
  return ''
end

-- Drops the oldest dead letters past `most` (the queue's max_dead_letters),
-- counted as dropped in the queue of `cfg`.
local function trim_dead_letters(d, most, usage, cfg)
  local over = redis.call('XLEN', d.dlq) - most
  if over <= 0 then return end
  local ids, entries, reasons = {}, {}, 0
  for _, e in ipairs(redis.call('XRANGE', d.dlq, '-', '+', 'COUNT', over)) do
    local id, reason = dead_letter_fields(e[2])
    entries[#entries + 1] = e[1]
    ids[#ids + 1] = id
    reasons = reasons + #(reason or '')
  end
  call_batched('XDEL', d.dlq, entries)
  forget(d, ids, usage, reasons, true)
  count('dropped', #ids, cfg)
end

-- Moves a message that left the other structures of the destination to its
-- dead letter queue with `reason`; it no longer counts in the destination's
-- held bytes, a group's head makes way for its next, and past the queue's
-- max_dead_letters the oldest dead letters go.
local function dead_letter(d, q, id, dc, fails, reason, usage, cfg)
  redis.call('DECRBY', d.held, message_bytes(d, id))
  groups_leave(d, {id})
  local entry = redis.call('XADD', d.dlq, '*', 'm', id, 'r', reason, 'f', fails)
  redis.call('HSET', d.state, id, fmt_state(dc, fails, 'd' .. entry))
  redis.call('ZREM', d.exp, id)  -- a dead letter does not expire
  if #reason > 0 then redis.call('HINCRBY', usage, 'bytes', #reason) end
  count('dead_lettered', 1, cfg)
  if q.max_dead_letters > 0 then trim_dead_letters(d, q.max_dead_letters, usage, cfg) end
end

local EXPIRED_REASON = 'expired'

-- Ends a message whose time to live ran out: it leaves whatever holds it and
-- goes to the dead letter queue with reason "expired", or, on a queue that
-- discards expired messages, is removed. Returns 'dead' or 'discarded'.
local function expire(d, q, id, dc, fails, where, usage)
  unlink(d, id, where)
  count('expired', 1)
  if q.discard_expired then
    forget(d, {id}, usage, 0, false)
    return 'discarded'
  end
  dead_letter(d, q, id, dc, fails, EXPIRED_REASON, usage)
  return 'dead'
end

-- Whether the message's expiry (from its envelope head) has passed.
local function expired_by(d, id, now)
  local _, _, x = env_head(redis.call('HGET', d.msg, id))
  return x ~= nil and x <= now
end

-- One failed delivery (nack or ack time-out) of an in-flight message; a dead
-- letter's reason counts in the tenant's usage hash `usage`. A message past
-- its expiry expires instead of coming back; one a newer message of its key
-- superseded meanwhile (last-value queues) is dropped.
-- Returns 'dead', 'discarded', 'superseded', or 'requeued' and the time it is due again.
local function fail_delivery(d, q, delays, id, dc, fails, reason, now, usage)
  if superseded_in_flight(d, id) then
    drop_superseded(d, id, usage)
    return 'superseded'
  end
  fails = fails + 1
  if expired_by(d, id, now) then return expire(d, q, id, dc, fails, 'f', usage) end
  redis.call('ZREM', d.inflight, id)
  if fails > q.max_redeliveries then
    dead_letter(d, q, id, dc, fails, reason, usage)
    return 'dead'
  end
  -- A queue with redeliver_now set (those made through SQS) skips the schedule: a failed
  -- delivery is ready again at once, as SQS makes a message visible when its time-out ends.
  local at = now + (q.redeliver_now and 0 or redelivery_delay(delays, fails))
  redis.call('ZADD', d.sched, at, id)
  redis.call('HSET', d.state, id, fmt_state(dc, fails, 's'))
  return 'requeued', at
end

-- Expires waiting messages whose time ran out, at most `limit`. An expired
-- message in flight only leaves the index: it can still be acked, and
-- expires when its delivery fails (fail_delivery). Returns how many expired.
local function expire_due(d, q, now, limit, usage)
  local ids = redis.call('ZRANGEBYSCORE', d.exp, '-inf', now, 'LIMIT', 0, limit)
  if #ids == 0 then return 0 end
  local states = redis.call('HMGET', d.state, unpack(ids))
  -- A group's head that expires makes way for its next, which may be among these: read afresh.
  local grouped = redis.call('EXISTS', d.grp) == 1
  local n = 0
  for i, id in ipairs(ids) do
    local s = states[i]
    if grouped then s = redis.call('HGET', d.state, id) end
    local where = s and string.sub(s, string.find(s, '|', string.find(s, '|', 1, true) + 1, true) + 1)
    if not s or in_flight_where(where) or string.sub(where, 1, 1) == 'd' then
      redis.call('ZREM', d.exp, id)
    else
      local dc, fails = parse_state(s)
      expire(d, q, id, dc, fails, where, usage)
      n = n + 1
    end
  end
  return n
end
