-- Shared prelude, part 1 of 7 (atomq.platform.scripts.LIB_PARTS): The conventions every script follows, counters, envelopes, delivery states, reading documents and readying messages.
-- The parts are prepended to every script, in order.
-- Conventions: KEYS[1..3] = tenant doc, docp, docr; KEYS[4] = queue cfg;
-- a destination is DEST_KEYS consecutive KEYS: ready, all, msg, state,
-- inflight, sched, dlq, rz (ordered ready), wake, exp (expiry index), lv
-- (a last-value queue's keys: k:<key> -> id, i:<id> -> =<key> | x<key>), cons
-- (an exclusive queue's consumers: name -> <first call ms>|<last call ms>,
-- #active -> the active one), held (the bytes of the copies it holds that are
-- neither acked nor dead: see message_bytes; their number is HLEN state - XLEN dlq),
-- delayed (how many copies in sched wait out their send's delay), grp and gw (a group-ordered
-- queue's groups: see _lib_groups.lua).
-- State value: "<delivery count>|<failures>|<where>", where is
--   r<stream id> ready on the stream, z ready in rz, f<since>,<holder> in flight
--   since <since> (ms, when the get delivered it) with <holder> (who got it, see
--   get.lua; data of format 6 and older has a bare f), s scheduled (for a redelivery, or,
--   with delivery count 0, at the end of its send's delay), d<stream id> dead,
--   w<sequence> waiting in gw behind its group's head, at its place (its send's sequence
--   number, or a delayed copy's when it fell due).
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
-- per bucket over the last RATE_SLOTS buckets (see atomq.platform.watch.counters).
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
          held = KEYS[i + 12], delayed = KEYS[i + 13], grp = KEYS[i + 14], gw = KEYS[i + 15]}
end

local function require_queue()
  local cfg = redis.call('HMGET', CFG, 'model', 'max_redeliveries', 'ack_timeout_ms', 'gen', 'on_expire', 'access',
                        'max_dead_letters', 'redeliver_now', 'ordering')
  if not cfg[1] then
    return redis.error_reply('NOQUEUE queue does not exist')
  end
  return {model = cfg[1], max_redeliveries = tonumber(cfg[2]), ack_timeout_ms = tonumber(cfg[3]), gen = cfg[4],
          discard_expired = cfg[5] == 'discard', exclusive = cfg[6] == 'exclusive',
          max_dead_letters = tonumber(cfg[7] or '0'), redeliver_now = cfg[8] == '1', grouped = cfg[9] == 'group'}
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
local function seq_score(priority, s)
  return (9 - priority) .. string.rep('0', 13 - #s) .. s
end
local function ready_score(priority, id)
  return seq_score(priority, string.match(id, '%-(%d+)$'))
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
-- big, unless `alone` (a later part of a get or a page: what is left of the
-- whole reply's bytes) is given and it is bigger than that. It reads in
-- slices that cannot pass what is left of the budget (`max_doc` bytes a
-- document at most), so the script never holds much more than the budget.
-- Returns the number of messages kept, their documents' data and properties,
-- in order, and the bytes they take.
local function take_within(live, ids, ndocs, budget, max_doc, alone)
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
      if kept > 0 and used + size > budget then return kept, data, props, used end
      if kept == 0 and alone and size > alone then return 0, data, props, 0 end
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
  return kept, data, props, used
end

-- The first of live[1..] up to `most` documents in all (ndocs[i] each; the
-- first message comes whatever its count): what one part of a get or of a
-- page may take, so that no script call reads more than that.
local function within_docs(live, ndocs, most)
  local out, docs = {}, 0
  for x = 1, #live do
    local nd = ndocs[live[x]]
    if x > 1 and docs + nd > most then break end
    docs = docs + nd
    out[x] = live[x]
  end
  return out
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

-- A message's group: the "g" of its envelope's JSON (`json`), nil for none. The head has no
-- room for it (a group may hold ',' and '|'); only an envelope that names a "g" is parsed.
local function json_group(json)
  if not string.find(json, '"g":', 1, true) then return nil end
  local g = cjson.decode(json)['g']
  if type(g) == 'string' then return g end
  return nil
end

-- The group of a stored envelope (nil, or false for a message that is gone: none).
local function group_of(env)
  return env and json_group(string.sub(env, string.find(env, '|', 1, true) + 1))
end

-- A message's member in gw at its place `seq` (a sequence number, text): a group's messages are
-- one lexical range ("<group>\0" to "<group>\1": no group holds a character below '!'), in
-- the order of their places.
local function group_member(group, seq, id)
  return group .. '\0' .. string.rep('0', 16 - #seq) .. seq .. '|' .. id
end

-- Counts n more (negative: fewer) copies of the destination waiting out their send's delay.
local function count_delayed(d, n)
  if n ~= 0 and redis.call('INCRBY', d.delayed, n) <= 0 then redis.call('DEL', d.delayed) end
end

-- Takes a message out of whatever structure holds it in the destination
-- (before its state changes: a scheduled one that was never delivered was delayed).
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
    local s = redis.call('HGET', d.state, id)
    if s and parse_state(s) == 0 then count_delayed(d, -1) end
  elseif tag == 'd' then
    redis.call('XDEL', d.dlq, string.sub(where, 2))
  elseif tag == 'w' then
    redis.call('ZREM', d.gw, group_member(group_of(redis.call('HGET', d.msg, id)), string.sub(where, 2), id))
  end
end

-- A change of `queue`'s topic patterns (written, or removed with the queue):
-- bumps their version (#v of the `patterns` hash), which a publish checks the
-- matcher its node cached against, and logs "<version>:<queue>" at the head
-- of the tenant's change `log`, which keeps the newest TOPIC_LOG_LENGTH, so a
-- node whose matcher is a few versions behind updates it with what moved
-- (topics_since.lua). Every bump of #v logs one: the log's entries, newest
-- first, count down one version at a time wherever it is complete.
local function topics_changed(patterns, log, queue)
  local version = redis.call('HINCRBY', patterns, '#v', 1)
  redis.call('LPUSH', log, version .. ':' .. queue)
  redis.call('LTRIM', log, 0, TOPIC_LOG_LENGTH - 1)
end
