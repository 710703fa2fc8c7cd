-- Delivers up to ARGV[1] ready messages, after moving due redeliveries to
-- ready and failing expired deliveries.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5..11]  the destination
-- KEYS[12]     subs (publish/subscribe: the subscriber is created on its first get)
-- KEYS[13]     the tenant's usage hash (ack time-outs may dead-letter)
-- KEYS[14]     the tenant's due index
-- ARGV[1]      max messages
-- ARGV[2]      redelivery delays in ms, comma-separated
-- ARGV[3]      subscriber name ("" for point-to-point)
-- ARGV[4]      most subscribers a queue may have
-- ARGV[5]      most document bytes in the reply (a first message bigger than that comes alone)
-- ARGV[6]      the largest document a send accepts (bounds what one read may fetch)
-- ARGV[7]      the destination's name in the due index
-- Returns {n, wake, last_id, then per message: id, delivery count, envelope,
--          then per document: data, properties ("" = none)}.
-- wake: ms until the next scheduled redelivery or ack deadline (-1 = none);
-- last_id: the ready stream's last id, to block on when nothing was delivered.

local q = require_queue()
if q.err then return q end
local sub = ARGV[3]
local misnamed = subscriber_misnamed(q, sub)
if misnamed then return misnamed end
if q.model == 'publish_subscribe' then
  local added = add_subscriber(KEYS[12], sub, tonumber(ARGV[4]))
  if type(added) == 'table' then return added end
end

local d = dest_at(5)
local delays = parse_delays(ARGV[2])
local now = now_ms()
sweep_destination(d, q, delays, now, 1000, KEYS[13])

local out = {0, -1, '0-0'}
local entries = redis.call('XRANGE', d.ready, '-', '+', 'COUNT', tonumber(ARGV[1]))
local n = #entries
if n == 0 then
  local first = next_due(d)
  if first then out[2] = math.max(0, first - now) end
  if redis.call('EXISTS', d.ready) == 1 then
    local info = redis.call('XINFO', 'STREAM', d.ready)
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then out[3] = info[i + 1] end
    end
  end
  return out
end

local entry_ids, ids, counts, fails = {}, {}, {}, {}
for i, e in ipairs(entries) do
  local f = e[2]
  entry_ids[i] = e[1]
  ids[i] = f[2]
  counts[i] = (tonumber(f[4]) or 0) + 1
  fails[i] = f[6] or 0
end
-- Everything that reads comes before the first write: a script's writes are
-- not rolled back, so nothing after a write may fail.
local envs = redis.call('HMGET', d.msg, unpack(ids))
local live, ndocs = {}, {}
for i = 1, n do
  if envs[i] then
    live[#live + 1] = i
    ndocs[i] = doc_count(envs[i])
  end
end
local kept, data, props = take_within(live, ids, ndocs, tonumber(ARGV[5]), tonumber(ARGV[6]))
-- The entries taken are the stream's first ones up to the last message kept
-- (with the entries of gone messages among them): trimming below the next id
-- drops exactly them, far cheaper than XDEL of each.
local upto = n
if kept < #live then upto = live[kept] end
local last = entry_ids[upto]
local dash = string.find(last, '-', 1, true)
redis.call('XTRIM', d.ready, 'MINID', string.sub(last, 1, dash) .. (tonumber(string.sub(last, dash + 1)) + 1))
out[1] = kept
if kept == 0 then return out end
local deadline = now + q.ack_timeout_ms
local state_args, flight_args = {}, {}
for x = 1, kept do
  local i = live[x]
  state_args[#state_args + 1] = ids[i]
  state_args[#state_args + 1] = counts[i] .. '|' .. fails[i] .. '|f'
  flight_args[#flight_args + 1] = deadline
  flight_args[#flight_args + 1] = ids[i]
end
call_batched('HSET', d.state, state_args)
call_batched('ZADD', d.inflight, flight_args)
due_by(KEYS[14], ARGV[7], deadline)
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
return out
