-- Shared prelude, prepended to every script by atomq.platform.scripts.
-- Conventions: KEYS[1..3] = tenant doc, docp, docr; KEYS[4] = queue cfg;
-- a destination is DEST_KEYS consecutive KEYS: ready, all, msg, state,
-- inflight, sched, dlq, rz (ordered ready), wake, exp (expiry index), lv
-- (a last-value queue's keys: k:<key> -> id, i:<id> -> =<key> | x<key>), cons
-- (an exclusive queue's consumers: name -> <first call ms>|<last call ms>,
-- #active -> the active one), held (the bytes of the copies it holds that are
-- neither acked nor dead: see message_bytes; their number is HLEN state - XLEN dlq).
-- State value: "<delivery count>|<failures>|<where>", where is
--   r<stream id> ready on the stream, z ready in rz, f<since>,<holder> in flight
--   since <since> (ms, when the get delivered it) with <holder> (who got it, see
--   get.lua; data of format 6 and older has a bare f), s scheduled, d<stream id> dead.
--   No part holds a '|': the first "|f" of a state marks one in flight.
-- Envelope value: "<head>|<JSON>" (the id starts with the send time), the
-- head "<document count>[,<priority>[,<expiry ms>]]", the priority given
-- when it is not the default or an expiry follows.
-- Ready stream entry: m = message id (format 2 entries may carry c, f =
-- delivery count and failures). Only first deliveries of the default
-- priority go on the stream, the path a plain queue takes; every other
-- ready message waits in rz, scored by priority then send order, so a
-- redelivery keeps its priority and its place.
local DOC, DOCP, DOCR, CFG = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

-- The queue's counters live in its cfg hash, so they go with the queue and
-- need no key of their own in every script: n:<kind> totals, and the
-- send/ack rate ring r:<s|a><slot> = "<10-second bucket>:<count>", one slot
-- per bucket over the last RATE_SLOTS buckets (see atomq.platform.counters).
local RATE_SLOTS = 32

-- `cfg`: another queue's cfg than the script's own (a publish counts in each queue it reaches).
local function count(kind, n, cfg)
  if n > 0 then redis.call('HINCRBY', cfg or CFG, 'n:' .. kind, n) end
end

local function count_rate(kind, n, now, cfg)
  if n <= 0 then return end
  cfg = cfg or CFG
  local bucket = math.floor(now / 10000)
  local field = 'r:' .. kind .. (bucket % RATE_SLOTS)
  local old = redis.call('HGET', cfg, field)
  if old then
    local colon = string.find(old, ':', 1, true)
    if tonumber(string.sub(old, 1, colon - 1)) == bucket then n = n + tonumber(string.sub(old, colon + 1)) end
  end
  redis.call('HSET', cfg, field, bucket .. ':' .. n)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- DEST_KEYS (the prelude's, from keys.DEST_KEY_COUNT) keys make a destination;
-- a script whose destination starts at KEYS[5] takes its other keys from EXTRA on.
local EXTRA = 5 + DEST_KEYS

local function dest_at(i)
  return {ready = KEYS[i], all = KEYS[i + 1], msg = KEYS[i + 2], state = KEYS[i + 3],
          inflight = KEYS[i + 4], sched = KEYS[i + 5], dlq = KEYS[i + 6],
          rz = KEYS[i + 7], wake = KEYS[i + 8], exp = KEYS[i + 9], lv = KEYS[i + 10], cons = KEYS[i + 11],
          held = KEYS[i + 12]}
end

local function require_queue()
  local cfg = redis.call('HMGET', CFG, 'model', 'max_redeliveries', 'ack_timeout_ms', 'gen', 'on_expire', 'access',
                        'max_dead_letters')
  if not cfg[1] then
    return redis.error_reply('NOQUEUE queue does not exist')
  end
  return {model = cfg[1], max_redeliveries = tonumber(cfg[2]), ack_timeout_ms = tonumber(cfg[3]), gen = cfg[4],
          discard_expired = cfg[5] == 'discard', exclusive = cfg[6] == 'exclusive',
          max_dead_letters = tonumber(cfg[7] or '0')}
end

local DEFAULT_PRIORITY = 4

-- The document count, priority and expiry (ms, nil for none) of an envelope.
-- An expiry past 10^14 ms may have been written in Lua's exponent notation
-- (before make_head formatted it): it reads too, to 14 digits.
local function env_head(e)
  local n, p, x = string.match(e, '^(%d+),?(%d*),?([^|]*)|')
  return tonumber(n), tonumber(p) or DEFAULT_PRIORITY, tonumber(x)
end

-- The head of a new envelope (see env_head). The expiry is formatted, not
-- concatenated: Lua writes a number with 14 digits at most, and one of 15
-- (from 10^14 ms, after the year 5138) as "2.534023007995e+14".
local function make_head(ndocs, priority, expiry)
  if expiry then return ndocs .. ',' .. priority .. ',' .. string.format('%.0f', expiry) end
  if priority ~= DEFAULT_PRIORITY then return ndocs .. ',' .. priority end
  return tostring(ndocs)
end

-- A message's score in rz: higher priority first, then send order (the
-- sequence number ending its id). Built as a string: 14 digits are exact
-- in a sorted set's double, and Lua would print a number with 14 digits
-- of precision only.
local function ready_score(priority, id)
  local s = string.match(id, '%-(%d+)$')
  return (9 - priority) .. string.rep('0', 13 - #s) .. s
end

-- A message id's place in its tenant's send order: the sequence number ending it.
local function send_order(id)
  return tonumber(string.match(id, '%-(%d+)$'))
end

-- Nudges gets blocked on the destination (see the wake key), once a script.
local woken = {}
local function wake(d)
  if not woken[d.wake] then
    woken[d.wake] = true
    redis.call('XADD', d.wake, 'MAXLEN', '1', '*', 'w', '1')
  end
end

-- A get or a settle names a subscriber exactly when its queue is publish/subscribe.
local function subscriber_misnamed(q, sub)
  if q.model == 'publish_subscribe' then
    if sub == '' then
      return redis.error_reply('NOSUBSCRIBER a subscriber is required for a publish/subscribe queue')
    end
  elseif sub ~= '' then
    return redis.error_reply('SUBSCRIBERP2P a point-to-point queue has no subscribers')
  end
end

local function parse_state(s)
  local a = string.find(s, '|', 1, true)
  local b = string.find(s, '|', a + 1, true)
  return tonumber(string.sub(s, 1, a - 1)), tonumber(string.sub(s, a + 1, b - 1)), string.sub(s, b + 1)
end

local function fmt_state(dc, fails, where)
  return dc .. '|' .. fails .. '|' .. where
end

-- The state of a delivery made at `now` (ms) to `holder`.
local function flight_state(dc, fails, now, holder)
  return dc .. '|' .. fails .. '|f' .. string.format('%.0f', now) .. ',' .. holder
end

-- Whether a state (or its where part) is in flight.
local function in_flight_state(s)
  return string.find(s, '|f', 1, true) ~= nil
end
local function in_flight_where(where)
  return string.byte(where) == 102
end

-- Only the document count is read here; the caller parses the rest.
local function doc_count(e)
  return tonumber(string.match(e, '^%d+'))
end

-- Calls a variadic command in slices, so a large batch never overflows Lua's C stack.
local function call_batched(cmd, key, args)
  local n = #args
  local i = 1
  while i <= n do
    local j = math.min(i + 999, n)
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end

-- HMGET in slices (see call_batched); returns one list in the order of `fields`.
local function hmget_batched(key, fields)
  local out = {}
  local n = #fields
  local i = 1
  while i <= n do
    local j = math.min(i + 999, n)
    local part = redis.call('HMGET', key, unpack(fields, i, j))
    for k = 1, #part do out[#out + 1] = part[k] end
    i = j + 1
  end
  return out
end

-- Whether any document of the tenant has properties: most tenants' have none,
-- and then a get or an ack reads no property of each document (a call per
-- document saved on an ack).
local function has_props()
  return redis.call('EXISTS', DOCP) == 1
end

-- Reads the documents of the messages live[1..] (indexes into ids, with
-- ndocs[i] documents each) until the reply would pass `budget` bytes of
-- documents and their properties; the first message always comes, however
-- big. It reads in slices that cannot pass what is left of the budget
-- (`max_doc` bytes a document at most), so the script never holds much more
-- than the budget. Returns the number of messages kept and their documents'
-- data and properties, in order.
local function take_within(live, ids, ndocs, budget, max_doc)
  local data, props = {}, {}
  local kept, used, pos = 0, 0, 1
  local props_kept = has_props()
  while pos <= #live do
    local fit = math.floor((budget - used) / max_doc)
    local last, want = pos - 1, 0
    for x = pos, #live do
      local nd = ndocs[live[x]]
      if want + nd > fit then break end
      want = want + nd
      last = x
    end
    if last < pos then last = pos end  -- no whole message surely fits: read one and see
    local docs = {}
    for x = pos, last do
      local id = ids[live[x]]
      for k = 1, ndocs[live[x]] do docs[#docs + 1] = id .. '.' .. k end
    end
    local dpart = hmget_batched(DOC, docs)
    local ppart = props_kept and hmget_batched(DOCP, docs) or {}
    local j = 0
    for x = pos, last do
      local nd = ndocs[live[x]]
      local size = 0
      for k = j + 1, j + nd do size = size + #(dpart[k] or '') + #(ppart[k] or '') end
      if kept > 0 and used + size > budget then return kept, data, props end
      for k = j + 1, j + nd do
        data[#data + 1] = dpart[k]
        props[#props + 1] = ppart[k]
      end
      j = j + nd
      used = used + size
      kept = kept + 1
    end
    pos = last + 1
  end
  return kept, data, props
end

-- Delay in ms after failed delivery k (1-based); the last delay repeats.
local function redelivery_delay(delays, k)
  return delays[math.min(k, #delays)]
end

local function parse_delays(s)
  local out = {}
  for v in string.gmatch(s, '[^,]+') do
    out[#out + 1] = tonumber(v)
  end
  return out
end

-- Puts a message back among the ready ones at its priority and its place.
local function make_ready(d, id, dc, fails)
  local _, priority = env_head(redis.call('HGET', d.msg, id))
  redis.call('ZADD', d.rz, ready_score(priority, id), id)
  redis.call('HSET', d.state, id, fmt_state(dc, fails, 'z'))
  wake(d)
end

-- Takes a message out of whatever structure holds it in the destination.
local function unlink(d, id, where)
  local tag = string.sub(where, 1, 1)
  if tag == 'r' then
    redis.call('XDEL', d.ready, string.sub(where, 2))
  elseif tag == 'z' then
    redis.call('ZREM', d.rz, id)
  elseif tag == 'f' then
    redis.call('ZREM', d.inflight, id)
  elseif tag == 's' then
    redis.call('ZREM', d.sched, id)
  elseif tag == 'd' then
    redis.call('XDEL', d.dlq, string.sub(where, 2))
  end
end

-- Last-value queues. A message's key is the value of the queue's
-- last_value_key property (text as it is, another JSON value as its JSON; ""
-- when the message lacks it, or when the queue names no property). The lv hash
-- keeps k:<key> -> the newest message of that key, and i:<id> -> its key,
-- marked x instead of = once a newer one arrived while it was in flight: it is
-- then dropped instead of coming back (fail_delivery, release).

-- The key of a message of a last-value queue keyed by property `prop`
-- (envelope JSON `env`).
local function last_value_key(prop, env)
  if prop == '' then return '' end
  local props = cjson.decode(env)['p']
  local v = type(props) == 'table' and props[prop] or nil
  if v == nil or v == cjson.null then return '' end
  if type(v) == 'string' then return v end
  return cjson.encode(v)
end

-- Forgets the last-value entries of messages leaving; returns the bytes they counted.
local function forget_last_values(d, ids)
  local fields = {}
  for i, id in ipairs(ids) do fields[i] = 'i:' .. id end
  local marks = hmget_batched(d.lv, fields)
  local gone, freed = {}, 0
  for i, id in ipairs(ids) do
    local mark = marks[i]
    if mark then
      gone[#gone + 1] = fields[i]
      local key = string.sub(mark, 2)
      freed = freed + LAST_VALUE_BYTES + 2 * #key
      if string.sub(mark, 1, 1) == '=' and redis.call('HGET', d.lv, 'k:' .. key) == id then
        gone[#gone + 1] = 'k:' .. key
      end
    end
  end
  if #gone > 0 then call_batched('HDEL', d.lv, gone) end
  return freed
end

-- Whether an in-flight message of a last-value queue was superseded meanwhile
-- (also after the queue stopped being one: it must not come back beside the newer).
local function superseded_in_flight(d, id)
  local mark = redis.call('HGET', d.lv, 'i:' .. id)
  return mark ~= false and string.sub(mark, 1, 1) == 'x'
end

-- Forgets message copies and releases their documents; frees each document
-- whose last reference this was, and takes what it freed off the tenant's
-- usage (hash `usage`: bytes, messages), counted as the send counted it
-- (see atomq.platform.footprint), plus `extra` bytes the caller freed
-- (dead-letter reasons). DOCR holds a count only while it is above one
-- (documents of several subscribers' copies); no entry means one. `dead`:
-- the copies are dead letters, which the destination's held bytes no longer
-- count; else their message_bytes come off them.
local function forget(d, ids, usage, extra, dead)
  if #ids == 0 then return end
  if redis.call('EXISTS', d.lv) == 1 then extra = (extra or 0) + forget_last_values(d, ids) end
  local envs = hmget_batched(d.msg, ids)
  call_batched('HDEL', d.msg, ids)
  call_batched('HDEL', d.state, ids)
  call_batched('ZREM', d.all, ids)
  if redis.call('EXISTS', d.exp) == 1 then call_batched('ZREM', d.exp, ids) end
  local docs, freed, copies, held = {}, extra or 0, 0, 0
  for i, id in ipairs(ids) do
    if envs[i] then
      copies = copies + 1
      freed = freed + COPY_BYTES + #envs[i]
      held = held + #envs[i]
      for k = 1, doc_count(envs[i]) do docs[#docs + 1] = id .. '.' .. k end
    end
  end
  redis.call('HINCRBY', usage, 'messages', -copies)
  -- No reference counts at all (a tenant whose messages each reached one queue): none to read.
  local refs = #docs > 0 and redis.call('EXISTS', DOCR) == 1 and hmget_batched(DOCR, docs) or {}
  local keep, drop, counted = {}, {}, {}
  local props_kept = has_props()
  for i, doc in ipairs(docs) do
    local r = tonumber(refs[i])
    if r and r > 2 then
      keep[#keep + 1] = doc
      keep[#keep + 1] = r - 1
    elseif r == 2 then
      counted[#counted + 1] = doc
    else
      drop[#drop + 1] = doc
    end
    if r and not dead then
      held = held + redis.call('HSTRLEN', DOC, doc) + (props_kept and redis.call('HSTRLEN', DOCP, doc) or 0)
    end
  end
  if #keep > 0 then call_batched('HSET', DOCR, keep) end
  if #counted > 0 then call_batched('HDEL', DOCR, counted) end
  if #drop > 0 then
    for _, doc in ipairs(drop) do
      local data = redis.call('HSTRLEN', DOC, doc)
      local props = props_kept and redis.call('HSTRLEN', DOCP, doc) or 0
      freed = freed + DOC_BYTES + data
      if props > 0 then freed = freed + DOC_BYTES + props end
      held = held + data + props
    end
    call_batched('HDEL', DOC, drop)
    if props_kept then call_batched('HDEL', DOCP, drop) end
  end
  redis.call('HINCRBY', usage, 'bytes', -freed)
  if not dead and held > 0 then redis.call('DECRBY', d.held, held) end
end

-- A message copy's bytes as a destination's limits count them: its stored
-- envelope (head and JSON) and its documents' data and properties.
local function message_bytes(d, id)
  local env = redis.call('HGET', d.msg, id)
  local size = #env
  local props_kept = has_props()
  for k = 1, doc_count(env) do
    local doc = id .. '.' .. k
    size = size + redis.call('HSTRLEN', DOC, doc) + (props_kept and redis.call('HSTRLEN', DOCP, doc) or 0)
  end
  return size
end

-- The copies a destination holds that are neither acked nor dead.
local function held_count(d)
  return redis.call('HLEN', d.state) - redis.call('XLEN', d.dlq)
end

-- Takes message `id` of a last-value queue as the newest of its key: the
-- waiting (ready or scheduled) message of that key is gone, counted
-- superseded in the queue of `cfg`; one in flight is marked to be dropped if
-- it fails. A resent dead letter arrives again with the entry it kept.
local function last_value_arrives(d, id, key, usage, cfg)
  local field = 'k:' .. key
  local old = redis.call('HGET', d.lv, field)
  if old and old ~= id then
    local s = redis.call('HGET', d.state, old)
    local where = s and select(3, parse_state(s))
    if where and in_flight_where(where) then
      redis.call('HSET', d.lv, 'i:' .. old, 'x' .. key)
    elseif where and string.sub(where, 1, 1) ~= 'd' then
      unlink(d, old, where)
      forget(d, {old}, usage, 0, false)
      count('superseded', 1, cfg)
    end
  end
  if redis.call('HEXISTS', d.lv, 'i:' .. id) == 0 then
    redis.call('HINCRBY', usage, 'bytes', LAST_VALUE_BYTES + 2 * #key)
  end
  redis.call('HSET', d.lv, field, id, 'i:' .. id, '=' .. key)
end

-- Drops an in-flight message that a newer one of its key superseded, instead
-- of letting it come back.
local function drop_superseded(d, id, usage)
  redis.call('ZREM', d.inflight, id)
  forget(d, {id}, usage, 0, false)
  count('superseded', 1)
end

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
-- held bytes, and past the queue's max_dead_letters the oldest dead letters go.
local function dead_letter(d, q, id, dc, fails, reason, usage, cfg)
  redis.call('DECRBY', d.held, message_bytes(d, id))
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
  local at = now + redelivery_delay(delays, fails)
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
  local n = 0
  for i, id in ipairs(ids) do
    local s = states[i]
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

-- Moves due redeliveries to ready, fails expired deliveries and expires
-- messages whose time to live ran out, at most `limit` of each (`usage`:
-- the tenant's usage hash). Returns the number of messages moved.
local function sweep_destination(d, q, delays, now, limit, usage)
  if q.exclusive then expire_consumers(d, q, now, usage) end
  local moved = expire_due(d, q, now, limit, usage)
  local expired = redis.call('ZRANGEBYSCORE', d.inflight, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(expired) do
    local dc, fails = parse_state(redis.call('HGET', d.state, id))
    fail_delivery(d, q, delays, id, dc, fails, 'ack timeout', now, usage)
    moved = moved + 1
  end
  count('ack_timeouts', #expired)
  local due = redis.call('ZRANGEBYSCORE', d.sched, '-inf', now, 'LIMIT', 0, limit)
  if #due > 0 then
    redis.call('ZREM', d.sched, unpack(due))
    for _, id in ipairs(due) do
      local dc, fails = parse_state(redis.call('HGET', d.state, id))
      make_ready(d, id, dc, fails)
    end
    moved = moved + #due
  end
  return moved
end

-- The earliest time (ms) anything of the destination falls due: a scheduled
-- redelivery, an ack deadline or an expiry; nil when none is pending.
local function next_due(d)
  local first
  for _, key in ipairs({d.sched, d.inflight, d.exp}) do
    local s = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #s > 0 and (not first or tonumber(s[2]) < first) then first = tonumber(s[2]) end
  end
  return first
end

-- Takes the expiry out of a message's envelope head: a dead letter resent
-- no longer expires. The shorter envelope comes off the usage hash `usage`.
local function drop_expiry(d, id, usage)
  local e = redis.call('HGET', d.msg, id)
  local n, priority, x = env_head(e)
  if not x then return end
  local bar = string.find(e, '|', 1, true)
  local kept = make_head(n, priority, nil) .. string.sub(e, bar)
  redis.call('HSET', d.msg, id, kept)
  redis.call('HINCRBY', usage, 'bytes', #kept - #e)
end

-- Keeps the due index's promise for a destination named `member` ("" for a
-- removed one, which no index names): its score is at or before anything of
-- it falling due at `at`, so a maintenance round that visits only due
-- destinations misses nothing. Only lowers a score; the sweep sets it exactly.
local function due_by(due, member, at)
  if member ~= '' then redis.call('ZADD', due, 'LT', at, member) end
end

-- Adds a subscriber (bumping the subscriber version that sends check), up to
-- `max` per queue. Returns 1 added, 0 already there.
local function add_subscriber(subs, name, max)
  if redis.call('SISMEMBER', subs, name) == 1 then return 0 end
  if redis.call('SCARD', subs) >= max then
    return redis.error_reply('TOOMANYSUBS the queue has its most subscribers')
  end
  redis.call('SADD', subs, name)
  redis.call('HINCRBY', CFG, 'subv', 1)
  return 1
end

-- Resolves ARGV selectors from ARGV[first] on into ids and, in "receipt"
-- mode, the delivery count each receipt was issued for. Repeated selectors
-- count once; two receipts of one message stay apart (one may be stale).
local function selected(mode, first)
  local ids, wants, seen = {}, {}, {}
  for i = first, #ARGV do
    local sel = ARGV[i]
    if not seen[sel] then
      seen[sel] = true
      local id, want = sel, false
      if mode == 'receipt' then
        local dc
        id, dc = string.match(sel, '^(.+)~(%d+)$')
        want = tonumber(dc)
      end
      if id then
        ids[#ids + 1] = id
        wants[#ids] = want
      end
    end
  end
  return ids, wants
end
