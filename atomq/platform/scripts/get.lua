-- Delivers up to ARGV[1] ready messages (one part of a get: Deliveries.take runs a get
-- of many messages as several calls, each within its part's bounds), after moving due redeliveries and
-- delayed copies to ready, failing expired deliveries and expiring messages
-- past their time.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5..]    the destination (DEST_KEYS keys), then from KEYS[EXTRA] on:
-- KEYS[EXTRA]     subs (publish/subscribe: the subscriber is created on its first get)
-- KEYS[EXTRA + 1] the tenant's usage hash (ack time-outs may dead-letter)
-- KEYS[EXTRA + 2] the tenant's due index
-- KEYS[EXTRA + 3] this call's record: what it delivered, "<active>|<id>,<delivery count>;..."
-- KEYS[EXTRA + 4] the tenant's message counter (delayed copies that fall due take a number)
-- KEYS[EXTRA + 5..] the queue's dead_letter_queue's keys, when it names one (dead_letter_target)
-- ARGV[1]      max messages
-- ARGV[2]      redelivery delays in ms, comma-separated
-- ARGV[3]      subscriber name ("" for point-to-point)
-- ARGV[4]      most subscribers a queue may have
-- ARGV[5]      most document bytes in the reply (a first message bigger than that comes alone,
--              unless ARGV[12] bounds it)
-- ARGV[6]      the largest document a send accepts (bounds what one read may fetch)
-- ARGV[7]      the destination's name in the due index
-- ARGV[8]      the consumer ("" for none: required by an exclusive queue, ignored by others)
-- ARGV[9]      most consumers an exclusive queue may have
-- ARGV[10]     how long the record is kept, in ms
-- ARGV[11]     who the deliveries are held by, kept in their state until they are settled: the
--              consumer when the get names one, else what the caller says made it (see Deliveries.take)
-- ARGV[12]     most document bytes a first message may bring (-1: any; a later part of a get,
--              whose whole reply must stay within its bound)
-- ARGV[13]     most documents in the reply (a first message with more comes alone)
-- ARGV[14]     most messages of each kind the call's sweep handles (sweep_destination)
-- Returns {n, wake, last_id, last_wake_id, active, more, bytes, then per message: id, delivery
--          count, envelope, then per document: data, properties ("" = none)}.
-- more: 1 when the call stopped at its own bounds (ARGV[1] candidates, or the bytes or documents
-- of its reply) and more may be ready, 0 when it found fewer ready than it could take; with
-- n = 0, 1 when the call did work a next one goes on from at once: its sweep stopped at its bound
-- before every expired delivery or due redelivery was handled (those may come first, so it
-- delivers nothing), or every candidate it looked at had expired or was gone;
-- bytes: the document bytes of the reply.
-- active: 1 the consumer is the exclusive queue's active one, 0 a standby
-- (it gets nothing), -1 the queue is not exclusive. An exclusive queue
-- delivers in send order whatever the priorities and, while a message waits
-- out a redelivery delay, nothing sent after it.
-- wake: ms until the next scheduled redelivery or delayed copy, ack deadline or expiry (-1 = none);
-- last_id, last_wake_id: the ready and wake streams' last ids, to block on
-- when nothing was delivered.
-- A call whose record exists ran before (the store's client sent it again after a
-- time-out): it answers the deliveries it made then that are still in flight as
-- it made them, and changes nothing, so no message counts a delivery nobody got.
-- The record reads "<active>,<more>|<id>,<delivery count>;...".

local RECORD = KEYS[EXTRA + 2 + 1]
local held = redis.call('GET', RECORD)
if held then
  local bar = string.find(held, '|', 1, true)
  local active, more = string.match(string.sub(held, 1, bar - 1), '^(-?%d+),?(%d*)$')
  local out = {0, -1, '0-0', '0-0', tonumber(active), tonumber(more) or 0, 0}
  local d = dest_at(5)
  local live, ids, counts, ndocs, envs = {}, {}, {}, {}, {}
  for id, dc in string.gmatch(string.sub(held, bar + 1), '([^,;]+),(%d+)') do
    local s = redis.call('HGET', d.state, id)
    local env = redis.call('HGET', d.msg, id)
    if s and env then
      local count, _, where = parse_state(s)
      if in_flight_where(where) and count == tonumber(dc) then
        local n = #ids + 1
        ids[n], counts[n], envs[n], ndocs[n] = id, count, env, doc_count(env)
        live[#live + 1] = n
      end
    end
  end
  local kept, data, props, used = take_within(live, ids, ndocs, math.huge, tonumber(ARGV[6]))
  out[1], out[7] = kept, used
  local j = 0
  for x = 1, kept do
    local i = live[x]
    local o = #out
    out[o + 1], out[o + 2], out[o + 3] = ids[i], counts[i], envs[i]
    for _ = 1, ndocs[i] do
      j = j + 1
      o = #out
      out[o + 1], out[o + 2] = data[j] or '', props[j] or ''
    end
  end
  return out
end

local q = require_queue()
if q.err then return q end
local stale = dead_letter_target(q, EXTRA + 5, ARGV[7])
if stale then return stale end
local sub = ARGV[3]
local misnamed = subscriber_misnamed(q, sub)
if misnamed then return misnamed end
if q.model == 'publish_subscribe' then
  local added = add_subscriber(KEYS[EXTRA], sub, tonumber(ARGV[4]))
  if type(added) == 'table' then return added end
end

local d = dest_at(5)
local delays = parse_delays(ARGV[2])
local now = now_ms()
local usage = KEYS[EXTRA + 1]
local _, late, behind = sweep_destination(d, q, delays, now, tonumber(ARGV[14]), usage, KEYS[EXTRA + 4])
local active = -1
if q.exclusive then
  local turn = consumer_turn(d, q, ARGV[8], now, tonumber(ARGV[9]))
  if type(turn) == 'table' then return turn end
  active = turn and 1 or 0
end
if (late or behind) and active ~= 0 then return {0, 0, '0-0', '0-0', active, 1, 0} end
local barrier = order_barrier(d, q)

local max = tonumber(ARGV[1])
local entries, ranked = {}, {}
if active ~= 0 then
  entries = redis.call('XRANGE', d.ready, '-', '+', 'COUNT', max)
  if q.exclusive then
    ranked = in_send_order(d, max)
  else
    ranked = redis.call('ZRANGE', d.rz, 0, max - 1, 'WITHSCORES')
  end
end
if barrier then
  -- Nothing sent after a message that waits out its redelivery delay: the
  -- stream is in send order, so it ends at the first entry past the barrier.
  for i = 1, #entries do
    if send_order(entries[i][2][2]) > barrier then
      for j = #entries, i, -1 do entries[j] = nil end
      break
    end
  end
  local kept = {}
  for i = 1, #ranked, 2 do
    if send_order(ranked[i]) < barrier then
      kept[#kept + 1] = ranked[i]
      kept[#kept + 1] = ranked[i + 1]
    end
  end
  ranked = kept
end
if #entries == 0 and #ranked == 0 then
  local out = {0, -1, '0-0', '0-0', active, 0, 0}
  local first = next_due(d)
  if first then out[2] = math.max(0, first - now) end
  if redis.call('EXISTS', d.ready) == 1 then
    local info = redis.call('XINFO', 'STREAM', d.ready)
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then out[3] = info[i + 1] end
    end
  end
  local nudge = redis.call('XREVRANGE', d.wake, '+', '-', 'COUNT', 1)
  if #nudge > 0 then out[4] = nudge[1][1] end
  return out
end

-- The candidates in delivery order: the stream's entries rank at the default
-- priority by send order, merged with rz. cand_entry[i] is the stream entry
-- of candidate i, or false for one in rz.
local ids, cand_entry, counts, fails = {}, {}, {}, {}
local zstates = {}
if #ranked > 0 then
  local zids = {}
  for i = 1, #ranked, 2 do zids[#zids + 1] = ranked[i] end
  zstates = redis.call('HMGET', d.state, unpack(zids))
end
local si, zi = 1, 1
while #ids < max and (si <= #entries or zi <= #ranked) do
  local take_stream = zi > #ranked
  if not take_stream and si <= #entries then
    take_stream = tonumber(ready_score(DEFAULT_PRIORITY, entries[si][2][2])) < tonumber(ranked[zi + 1])
  end
  local n = #ids + 1
  if take_stream then
    local e = entries[si]
    local f = e[2]
    ids[n], cand_entry[n] = f[2], e[1]
    counts[n] = (tonumber(f[4]) or 0) + 1
    fails[n] = f[6] or 0
    si = si + 1
  else
    ids[n], cand_entry[n] = ranked[zi], false
    local s = zstates[(zi + 1) / 2]
    if s then
      local dc, fl = parse_state(s)
      counts[n], fails[n] = dc + 1, fl
    end
    zi = zi + 2
  end
end
local n = #ids

-- Everything that reads comes before the first write: a script's writes are
-- not rolled back, so nothing after a write may fail.
local envs = redis.call('HMGET', d.msg, unpack(ids))
local past = {}
if redis.call('EXISTS', d.exp) == 1 then
  local xs = redis.call('ZMSCORE', d.exp, unpack(ids))
  for i = 1, n do
    if xs[i] and tonumber(xs[i]) <= now then past[i] = true end
  end
end
local live, ndocs = {}, {}
for i = 1, n do
  if envs[i] and counts[i] and not past[i] then
    live[#live + 1] = i
    ndocs[i] = doc_count(envs[i])
  end
end
local alone = tonumber(ARGV[12])
local kept, data, props, used = take_within(within_docs(live, ndocs, tonumber(ARGV[13])), ids, ndocs,
                                            tonumber(ARGV[5]), tonumber(ARGV[6]), alone >= 0 and alone or nil)
-- The candidates taken are the first ones up to the last message kept (with
-- gone ones among them). On the stream they are its first entries: trimming
-- below the next id drops exactly them, far cheaper than XDEL of each.
local upto = n
if kept < #live then upto = kept > 0 and live[kept] or live[1] - 1 end
local more = (n >= max or kept < #live) and 1 or 0
local last_entry, taken_ranked = nil, {}
for i = 1, upto do
  if cand_entry[i] then
    last_entry = cand_entry[i]
  elseif not past[i] then
    taken_ranked[#taken_ranked + 1] = ids[i]
  end
end
for i = 1, n do
  if past[i] then
    local dc, fl, where = parse_state(redis.call('HGET', d.state, ids[i]))
    expire(d, q, ids[i], dc, fl, where, usage)
  end
end
if last_entry then
  local dash = string.find(last_entry, '-', 1, true)
  redis.call('XTRIM', d.ready, 'MINID',
             string.sub(last_entry, 1, dash) .. (tonumber(string.sub(last_entry, dash + 1)) + 1))
end
if #taken_ranked > 0 then call_batched('ZREM', d.rz, taken_ranked) end
if kept == 0 then more = #live == 0 and 1 or 0 end  -- each candidate expired or gone: look further
local out = {kept, -1, '0-0', '0-0', active, more, used}
if kept == 0 then return out end
local deadline = now + q.ack_timeout_ms
local state_args, flight_args = {}, {}
for x = 1, kept do
  local i = live[x]
  state_args[#state_args + 1] = ids[i]
  state_args[#state_args + 1] = flight_state(counts[i], fails[i], now, ARGV[11])
  flight_args[#flight_args + 1] = deadline
  flight_args[#flight_args + 1] = ids[i]
end
call_batched('HSET', d.state, state_args)
call_batched('ZADD', d.inflight, flight_args)
due_by(KEYS[EXTRA + 2], ARGV[7], deadline)
local redelivered = 0
local j, o = 0, #out
for x = 1, kept do
  local i = live[x]
  if counts[i] > 1 then redelivered = redelivered + 1 end
  out[o + 1], out[o + 2], out[o + 3] = ids[i], counts[i], envs[i]
  o = o + 3
  for _ = 1, ndocs[i] do
    j = j + 1
    out[o + 1], out[o + 2] = data[j] or '', props[j] or ''
    o = o + 2
  end
end
count('delivered', kept)
count('redelivered', redelivered)
local record = {}
for x = 1, kept do record[x] = ids[live[x]] .. ',' .. counts[live[x]] end
redis.call('SET', RECORD, active .. ',' .. more .. '|' .. table.concat(record, ';'), 'PX', tonumber(ARGV[10]))
return out
