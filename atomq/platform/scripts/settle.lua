-- Ends, fails, gives back or extends deliveries of in-flight messages:
-- ack, nack, release and extend.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5..]    the destination (DEST_KEYS keys), then from KEYS[EXTRA] on:
-- KEYS[EXTRA]     subs
-- KEYS[EXTRA + 1] the tenant's usage hash
-- KEYS[EXTRA + 2] the tenant's due index
-- KEYS[EXTRA + 3] this call's record: what it settled, "<done>,<dead>"
-- KEYS[EXTRA + 4] the tenant's message counter (delayed copies that fall due take a number)
-- KEYS[EXTRA + 5..] the queue's dead_letter_queue's keys, when it names one (dead_letter_target)
-- ARGV[1]      action: ack | nack | release | extend
-- ARGV[2]      action argument: nack reason, or extension or release delay in ms
-- ARGV[3]      redelivery delays in ms, comma-separated (nack)
-- ARGV[4]      selector mode: id | receipt
-- ARGV[5]      subscriber name ("" for point-to-point)
-- ARGV[6]      the destination's name in the due index
-- ARGV[7]      the consumer ("" for none: required by an exclusive queue, ignored by others;
--              a release without one is an operator's, which any consumer's deliveries yield to)
-- ARGV[8]      most consumers an exclusive queue may have
-- ARGV[9]      how long the record is kept, in ms
-- ARGV[10]     most messages of each kind the call's sweep handles (sweep_destination)
-- ARGV[11..]   message ids or receipts ("<id>~<delivery count>")
-- Only a message in flight is touched, and with a receipt only the delivery
-- that receipt was issued for; on an exclusive queue, only by its active
-- consumer. Returns {done, dead} (dead: nack only).
-- release gives a delivery back without counting it as failed: the message
-- is redelivered after the delay (none: ready at once), its failures unchanged; on a
-- queue made through SQS, a message given back after its last receive (receives_spent) is
-- dead-lettered.
-- A call whose record exists ran before (the store's client sent it again after a
-- time-out): it changes nothing and answers what it answered then.

local RECORD = KEYS[EXTRA + 3]
local held = redis.call('GET', RECORD)
if held then
  local comma = string.find(held, ',', 1, true)
  return {tonumber(string.sub(held, 1, comma - 1)), tonumber(string.sub(held, comma + 1))}
end

local function settle()
  local q = require_queue()
  if q.err then return q end
  local stale = dead_letter_target(q, EXTRA + 5, ARGV[6])
  if stale then return stale end
  local sub = ARGV[5]
  local misnamed = subscriber_misnamed(q, sub)
  if misnamed then return misnamed end
  if q.model == 'publish_subscribe' and redis.call('SISMEMBER', KEYS[EXTRA], sub) == 0 then
    return redis.error_reply('UNKNOWNSUBSCRIBER the subscriber does not exist')
  end
  local d = dest_at(5)
  local action = ARGV[1]
  local now = now_ms()
  local delays = parse_delays(ARGV[3])
  -- A delivery past its deadline has failed, whether or not a sweep saw it yet: this one's,
  -- bounded, or below, for one of those this call names that the sweep left.
  local _, late = sweep_destination(d, q, delays, now, tonumber(ARGV[10]), KEYS[EXTRA + 1], KEYS[EXTRA + 4])
  if not (action == 'release' and ARGV[7] == '') then
    local turn = consumer_turn(d, q, ARGV[7], now, tonumber(ARGV[8]))
    if type(turn) == 'table' then return turn end
    if not turn then return {0, 0} end
  end
  local ids, wants = selected(ARGV[4], 11)
  if #ids == 0 then return {0, 0} end
  local states = hmget_batched(d.state, ids)
  local hits, hit_dc, hit_fails, taken = {}, {}, {}, {}
  for i, id in ipairs(ids) do
    local s = states[i]
    -- The counts are parsed only where a receipt or a nack needs them.
    if s and not taken[id] and in_flight_state(s) then
      local dc, fails = 0, 0
      if wants[i] or action == 'nack' or action == 'release' then dc, fails = parse_state(s) end
      -- One call settles a message once, however many selectors name it.
      if not wants[i] or wants[i] == dc then
        taken[id] = true
        hits[#hits + 1] = id
        hit_dc[#hits] = dc
        hit_fails[#hits] = fails
      end
    end
  end
  if late and #hits > 0 then
    local kept, kept_dc, kept_fails = {}, {}, {}
    for i, id in ipairs(hits) do
      local deadline = redis.call('ZSCORE', d.inflight, id)
      if deadline and tonumber(deadline) <= now then
        fail_delivery(d, q, delays, id, hit_dc[i], hit_fails[i], 'ack timeout', now, KEYS[EXTRA + 1])
        count('ack_timeouts', 1)
      else
        kept[#kept + 1], kept_dc[#kept + 1], kept_fails[#kept + 1] = id, hit_dc[i], hit_fails[i]
      end
    end
    hits, hit_dc, hit_fails = kept, kept_dc, kept_fails
  end
  if #hits == 0 then return {0, 0} end
  if action == 'ack' then
    call_batched('ZREM', d.inflight, hits)
    forget(d, hits, KEYS[EXTRA + 1], 0)
    count('acked', #hits)
    count_rate('a', #hits, now)
    return {#hits, 0}
  elseif action == 'extend' then
    local deadline = now + tonumber(ARGV[2])
    for first = 1, #hits, 500 do
      local args = {}
      for i = first, math.min(first + 499, #hits) do
        args[#args + 1] = deadline
        args[#args + 1] = hits[i]
      end
      redis.call('ZADD', d.inflight, 'XX', unpack(args))
    end
    due_by(KEYS[EXTRA + 2], ARGV[6], deadline)  -- an extension may also shorten a deadline
    return {#hits, 0}
  elseif action == 'release' then
    local due = now + tonumber(ARGV[2])
    for i, id in ipairs(hits) do
      if superseded_in_flight(d, id) then
        drop_superseded(d, id, KEYS[EXTRA + 1])
      elseif expired_by(d, id, now) then
        expire(d, q, id, hit_dc[i], hit_fails[i], 'f', KEYS[EXTRA + 1])
      elseif receives_spent(q, hit_dc[i]) then
        redis.call('ZREM', d.inflight, id)
        dead_letter(d, q, id, hit_dc[i], hit_fails[i], RECEIVES_REASON, KEYS[EXTRA + 1])
      else
        redis.call('ZREM', d.inflight, id)
        if due <= now then
          make_ready(d, id, hit_dc[i], hit_fails[i])  -- at once: a get waiting on the queue hears of it
        else
          redis.call('ZADD', d.sched, due, id)
          redis.call('HSET', d.state, id, fmt_state(hit_dc[i], hit_fails[i], 's'))
        end
      end
    end
    if due > now then due_by(KEYS[EXTRA + 2], ARGV[6], due) end
    return {#hits, 0}
  end
  local requeued, dead, first_due = 0, 0, nil
  for i, id in ipairs(hits) do
    local outcome, at = fail_delivery(d, q, delays, id, hit_dc[i], hit_fails[i], ARGV[2], now, KEYS[EXTRA + 1])
    if outcome == 'dead' then
      dead = dead + 1
    elseif outcome == 'requeued' then
      requeued = requeued + 1
      if not first_due or at < first_due then first_due = at end
    end
  end
  if first_due then due_by(KEYS[EXTRA + 2], ARGV[6], first_due) end
  count('nacked', #hits)
  return {requeued, dead}
end

local reply = settle()
if not reply.err and (reply[1] > 0 or reply[2] > 0) then
  redis.call('SET', RECORD, reply[1] .. ',' .. reply[2], 'PX', tonumber(ARGV[9]))
end
return reply
