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

local EXPIRED_REASON = 'expired'

-- Dead letters moved to another queue: a queue's dead_letter_queue setting names the target
-- (config fields dlq_to, its name, and dlq_key, its cfg key). A script that may dead-letter
-- takes the target's keys from KEYS[at] on (atomq.platform.queues.dead_letter_targets): its cfg,
-- the DEST_KEYS keys of its destination, and the tenant's index of oldest messages, hash of
-- pending copies, due index and message counter.

-- The target queue `name` whose keys (dead_letter_targets.target_keys) start at KEYS[at].
local function target_at(at, name)
  return {name = name, cfg = KEYS[at], d = dest_at(at + 1), oldest = KEYS[at + 1 + DEST_KEYS],
          pending = KEYS[at + 2 + DEST_KEYS], due = KEYS[at + 3 + DEST_KEYS], seq = KEYS[at + 4 + DEST_KEYS]}
end

-- Reads the queue's dead_letter_queue setting into q.target (none: nil), with the keys the
-- caller passed from KEYS[at] on; `member` names the destination the dead letters leave (its
-- name in the due index). Returns the error STALEDLQ, before the script writes anything, when
-- the caller passed the keys of another target than the setting names (or keys where it names
-- none, or none where it names one): the caller reads the setting again and calls once more.
local function dead_letter_target(q, at, member)
  local set = redis.call('HMGET', CFG, 'dlq_to', 'dlq_key')
  local name = set[1] or ''
  local key = name ~= '' and set[2] or ''
  if (KEYS[at] or '') ~= key then
    return redis.error_reply('STALEDLQ the queue\'s dead_letter_queue changed')
  end
  if name ~= '' then
    q.target = target_at(at, name)
    q.target.source = member
  end
end

local DL_FIELD = ',"dl":'

-- What a move to another queue adds at the end of a message's envelope JSON: why it became a
-- dead letter, the destination it left and the deliveries it had there (the message's
-- dead_letter_* properties: atomq.platform.models.Envelope).
local function dead_letter_record(reason, source, dc)
  return DL_FIELD .. '[' .. cjson.encode(reason) .. ',' .. cjson.encode(source) .. ',' ..
         string.format('%d', dc) .. ']}'
end

-- An envelope's JSON without the record an earlier move added (its last field, written by
-- dead_letter_record, so rebuilt from what it holds): a message moved again carries only the
-- newest, and one a move task brings back none.
local function without_dead_letter(json)
  if not string.find(json, DL_FIELD, 1, true) then return json end
  local ok, env = pcall(cjson.decode, json)
  local dl = ok and type(env) == 'table' and env['dl']
  if type(dl) ~= 'table' then return json end
  local built, old = pcall(dead_letter_record, dl[1], dl[2], dl[3])
  if built and string.sub(json, -#old) == old then return string.sub(json, 1, #json - #old) .. '}' end
  return json
end

-- Takes message `id` (`bytes` as message_bytes counts it in d) out of destination d, where
-- nothing else holds it any more: its envelope, state, browse and expiry entries and held bytes;
-- a group's head makes way for its next. Returns the usage bytes its last-value entries freed.
local function lift(d, id, bytes)
  redis.call('DECRBY', d.held, bytes)
  groups_leave(d, {id})
  local freed = 0
  if redis.call('EXISTS', d.lv) == 1 then freed = forget_last_values(d, {id}) end
  redis.call('HDEL', d.msg, id)
  redis.call('HDEL', d.state, id)
  redis.call('ZREM', d.all, id)
  redis.call('ZREM', d.exp, id)
  return freed
end

-- Puts message `id` with envelope `env` (counting `size` bytes of limits) into point-to-point
-- queue t (target_at) as a first delivery waiting at its priority, as if sent now: it takes the
-- tenant's next sequence number for its place in rz, as a delayed copy that falls due does
-- (arrive, _lib_sweep.lua), or, on a queue ordered by group (`grouped`), behind its group's
-- head when that is out; an expiry goes into the expiry index.
local function land(t, id, env, size, grouped)
  local _, priority, expiry = env_head(env)
  redis.call('HSET', t.d.msg, id, env)
  redis.call('ZADD', t.d.all, 0, id)
  local place = string.format('%.0f', redis.call('INCR', t.seq))
  local group = grouped and group_of(env)
  if group and group_waits(t.d, group, id, place) then
    redis.call('HSET', t.d.state, id, fmt_state(0, 0, 'w' .. place))
  else
    redis.call('ZADD', t.d.rz, seq_score(priority, place), id)
    wake(t.d)
    redis.call('HSET', t.d.state, id, fmt_state(0, 0, 'z'))
  end
  redis.call('INCRBY', t.d.held, size)
  redis.call('ZADD', t.oldest, 'LT', tonumber(string.match(id, '^%d+')), t.name)
  if expiry then
    redis.call('ZADD', t.d.exp, expiry, id)
    redis.call('ZADD', t.due, 'LT', expiry, t.name)  -- as due_by (_lib_sweep.lua) keeps the index's promise
  end
end

-- Whether queue t (cfg fields c: model, lv, max_messages, max_bytes, max_message_bytes, gen) takes
-- message `id` of `size` bytes: a point-to-point queue that is not a last-value queue, does not
-- hold a copy of the message already (a topic reached both), and has room under its limits,
-- counting what chunked sends still owe it.
local function takes(t, c, id, size)
  if c[1] ~= 'point_to_point' or c[2] == '1' or redis.call('HEXISTS', t.d.state, id) == 1 then return false end
  local max_n, max_b, max_mb = tonumber(c[3] or '0'), tonumber(c[4] or '0'), tonumber(c[5] or '0')
  if max_mb > 0 and size > max_mb then return false end
  if max_n == 0 and max_b == 0 then return true end
  local owed_n, owed_b = pending_of(t.pending, t.name, c[6])
  if max_n > 0 and held_count(t.d) + owed_n + 1 > max_n then return false end
  return max_b == 0 or tonumber(redis.call('GET', t.d.held) or '0') + owed_b + size <= max_b
end

-- Moves dead letter `id` (which left every other structure of d) into q's target queue as an
-- ordinary message, delivered afresh (delivery count and failures 0) at its priority, with
-- the dead letter's record (dead_letter_record). Its own expiry goes; the target's
-- message_ttl_ms applies from now, except to a message that expired: it arrives without one, so
-- two queues that send each other their expired messages do not pass them back and forth for
-- ever. Returns false, changing nothing, when the target does not take it (takes): the message
-- then stays among the queue's own dead letters.
local function move_dead_letter(d, q, id, dc, reason, usage)
  local t = q.target
  if t.cfg == CFG or t.source == '' then return false end
  local c = redis.call('HMGET', t.cfg, 'model', 'lv', 'max_messages', 'max_bytes', 'max_message_bytes', 'gen',
                       'message_ttl_ms', 'ordering')
  local env = redis.call('HGET', d.msg, id)
  local bar = string.find(env, '|', 1, true)
  local json = without_dead_letter(string.sub(env, bar + 1))
  local ndocs, priority = env_head(env)
  local ttl = tonumber(c[7] or '0')
  local expiry = nil
  if ttl > 0 and reason ~= EXPIRED_REASON then expiry = now_ms() + ttl end
  local moved = make_head(ndocs, priority, expiry) .. '|' .. string.sub(json, 1, #json - 1) ..
                dead_letter_record(reason, t.source, dc)
  local bytes = message_bytes(d, id)
  local size = bytes - #env + #moved
  if not takes(t, c, id, size) then return false end
  local freed = lift(d, id, bytes)
  land(t, id, moved, size, c[8] == 'group')
  redis.call('HINCRBY', usage, 'bytes', #moved - #env - freed)
  return true
end

-- Moves a message that left the other structures of the destination to the
-- queue's dead_letter_queue (move_dead_letter), or else to its own dead letter
-- queue with `reason`; it no longer counts in the destination's held bytes, a
-- group's head makes way for its next, and past the queue's max_dead_letters
-- the oldest dead letters go.
local function dead_letter(d, q, id, dc, fails, reason, usage, cfg)
  count('dead_lettered', 1, cfg)
  if q.target and move_dead_letter(d, q, id, dc, reason, usage) then return end
  redis.call('DECRBY', d.held, message_bytes(d, id))
  groups_leave(d, {id})
  local entry = redis.call('XADD', d.dlq, '*', 'm', id, 'r', reason, 'f', fails)
  redis.call('HSET', d.state, id, fmt_state(dc, fails, 'd' .. entry))
  redis.call('ZREM', d.exp, id)  -- a dead letter does not expire
  if #reason > 0 then redis.call('HINCRBY', usage, 'bytes', #reason) end
  if q.max_dead_letters > 0 then trim_dead_letters(d, q.max_dead_letters, usage, cfg) end
end

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

local RECEIVES_REASON = 'max receives'

-- Whether a message delivered `dc` times has had its last delivery on a queue made through
-- SQS (redeliver_now): there every receive counts, also one given back without a failure (a
-- visibility of 0), as SQS's maxReceiveCount does.
local function receives_spent(q, dc)
  return q.redeliver_now and dc > q.max_redeliveries
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
  if fails > q.max_redeliveries or receives_spent(q, dc) then
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
