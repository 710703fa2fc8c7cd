-- Stores a batch of messages and their documents, all or nothing.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5]      seq (the tenant's message counter)
-- KEYS[6]      subs (subscriber set; checked through cfg.subv)
-- KEYS[7..]    DEST_KEYS keys per destination (ARGV[2] destinations), then the
--              de-duplication markers, then the tenant's due index, its index of
--              oldest messages, its marker ledger and (last) its usage hash
-- ARGV[5]      the tenant's disk quota in bytes (0: none)
-- ARGV[1]      the route the caller read: "<model>|<generation>|<subscriber version>"
--              (no subscriber version for point-to-point)
-- ARGV[2]      number of destinations
-- ARGV[3]      de-duplication window in ms
-- A new marker's bytes count in the usage hash's `markers` until the marker
-- expires: the ledger (hash <expiry ms> -> bytes) says when the maintenance
-- takes them off again (due.lua).
-- ARGV[6..]    each destination's name in the indexes of due and oldest messages
-- ARGV[4]      number of messages; from ARGV[6 + ARGV[2]] on, per message:
--              dedupe key index (0 = none), priority, expiry (ms since the epoch,
--              0 = none), time to live (ms, 0 = none), envelope JSON, document
--              count, then per document: data, properties JSON ("" = none)
-- A message expires at the earliest of its expiry, its time to live and the
-- queue's message_ttl_ms after the send; a message of the default priority
-- goes on the ready stream, any other in rz (see the prelude).
-- Returns the message ids in order (a repeated dedupe id returns the original id),
-- or the error NOQUEUE, or STALESUBS when the route changed since the caller read it,
-- or QUOTA <used> <limit> when storing the batch would pass the tenant's quota.
-- Everything is read and checked before the first write: a refused batch
-- changes nothing.

local q = require_queue()
if q.err then return q end
local route = q.model .. '|' .. q.gen .. '|'
if q.model == 'publish_subscribe' then
  route = route .. (redis.call('HGET', CFG, 'subv') or '0')
end
if route ~= ARGV[1] then
  return redis.error_reply('STALESUBS the queue model or its subscribers changed')
end

local ndest = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local nmsg = tonumber(ARGV[4])
local dests = {}
for i = 1, ndest do
  dests[i] = dest_at(7 + (i - 1) * DEST_KEYS)
end
local dd_base = 7 + ndest * DEST_KEYS - 1

local USAGE = KEYS[#KEYS]
local LEDGER = KEYS[#KEYS - 1]
local OLDEST = KEYS[#KEYS - 2]
local DUE = KEYS[#KEYS - 3]
local queue_ttl = tonumber(redis.call('HGET', CFG, 'message_ttl_ms') or '0')
local now = now_ms()
local quota = tonumber(ARGV[5])

-- Pass 1, reads only: which messages are new, and what they would store.
local first = {}          -- dedupe key -> index of the batch's first message with it
local original = {}       -- message index -> the id a repeated dedupe id answers with
local repeat_of = {}      -- message index -> earlier message of this batch it repeats
local starts = {}         -- message index -> ARGV position of its envelope
local priorities = {}     -- message index -> priority
local expiries = {}       -- message index -> expiry (ms) or nil
local heads = {}          -- message index -> envelope head
local dds = {}            -- message index -> dedupe key index
local new_count, new_bytes = 0, 0
local pos = 6 + ndest
for m = 1, nmsg do
  local dd = tonumber(ARGV[pos])
  local priority = tonumber(ARGV[pos + 1])
  local x = tonumber(ARGV[pos + 2])
  local ttl = tonumber(ARGV[pos + 3])
  if x == 0 then x = nil end
  if ttl > 0 and (not x or now + ttl < x) then x = now + ttl end
  if queue_ttl > 0 and (not x or now + queue_ttl < x) then x = now + queue_ttl end
  priorities[m], expiries[m], dds[m] = priority, x, dd
  pos = pos + 3  -- from here on, as if the message started at its envelope
  local ndocs = tonumber(ARGV[pos + 2])
  heads[m] = make_head(ndocs, priority, x)
  starts[m] = pos
  if dd > 0 then
    local key = KEYS[dd_base + dd]
    if first[key] then
      repeat_of[m] = first[key]
    else
      first[key] = m
      local old = redis.call('GET', key)
      if old then
        local bar = string.find(old, '|', 1, true)
        if string.sub(old, 1, bar - 1) == q.gen then original[m] = string.sub(old, bar + 1) end
      end
    end
  end
  if not original[m] and not repeat_of[m] then
    new_count = new_count + 1
    if ndest > 0 then
      new_bytes = new_bytes + (COPY_BYTES + #ARGV[pos + 1] + #heads[m] + 1) * ndest
      for k = 0, ndocs - 1 do
        local props = #ARGV[pos + 4 + 2 * k]
        new_bytes = new_bytes + DOC_BYTES + #ARGV[pos + 3 + 2 * k]
        if props > 0 then new_bytes = new_bytes + DOC_BYTES + props end
      end
    end
  end
  pos = pos + 3 + ndocs * 2
end
if quota > 0 and new_bytes > 0 then
  local counted = redis.call('HMGET', USAGE, 'bytes', 'markers')
  local used = tonumber(counted[1] or '0') + tonumber(counted[2] or '0')
  if used + new_bytes > quota then
    return redis.error_reply('QUOTA ' .. used .. ' ' .. quota .. ' ' .. new_bytes)
  end
end

-- Pass 2: ids, de-duplication markers, documents and messages.
local seq = redis.call('INCRBY', KEYS[5], new_count) - new_count
local stamp = tostring(now)
local ids = {}
local marker_bytes = 0
local doc_args, docp_args, docr_args, msg_args, all_args = {}, {}, {}, {}, {}
local fresh = {}          -- the stored messages' indexes, in order
local first_expiry
for m = 1, nmsg do
  pos = starts[m]
  local dd = dds[m]
  local json = ARGV[pos + 1]
  local ndocs = tonumber(ARGV[pos + 2])
  pos = pos + 3
  if original[m] then
    ids[m] = original[m]
  elseif repeat_of[m] then
    ids[m] = ids[repeat_of[m]]
  else
    seq = seq + 1
    local s = tostring(seq)
    local id = stamp .. '-' .. string.rep('0', 12 - #s) .. s
    ids[m] = id
    if dd > 0 then
      local key, value = KEYS[dd_base + dd], q.gen .. '|' .. id
      redis.call('SET', key, value, 'PX', window)
      marker_bytes = marker_bytes + MARKER_BYTES + #key + #value
    end
    if ndest > 0 then
      for k = 1, ndocs do
        local doc = id .. '.' .. k
        doc_args[#doc_args + 1] = doc
        doc_args[#doc_args + 1] = ARGV[pos]
        if ARGV[pos + 1] ~= '' then
          docp_args[#docp_args + 1] = doc
          docp_args[#docp_args + 1] = ARGV[pos + 1]
        end
        if ndest > 1 then
          docr_args[#docr_args + 1] = doc
          docr_args[#docr_args + 1] = ndest
        end
        pos = pos + 2
      end
      msg_args[#msg_args + 1] = id
      msg_args[#msg_args + 1] = heads[m] .. '|' .. json
      fresh[#fresh + 1] = m
      local x = expiries[m]
      if x and (not first_expiry or x < first_expiry) then first_expiry = x end
      all_args[#all_args + 1] = 0
      all_args[#all_args + 1] = id
    end
  end
end

if #msg_args > 0 then
  call_batched('HSET', DOC, doc_args)
  if #docp_args > 0 then call_batched('HSET', DOCP, docp_args) end
  if #docr_args > 0 then call_batched('HSET', DOCR, docr_args) end
  for i, d in ipairs(dests) do
    redis.call('ZADD', OLDEST, 'NX', now, ARGV[5 + i])
    call_batched('HSET', d.msg, msg_args)
    call_batched('ZADD', d.all, all_args)
    local state_args, ranked_args, expiry_args = {}, {}, {}
    for k, m in ipairs(fresh) do
      local id = msg_args[2 * k - 1]
      local where = 'z'
      if priorities[m] == DEFAULT_PRIORITY then
        where = 'r' .. redis.call('XADD', d.ready, '*', 'm', id)
      else
        ranked_args[#ranked_args + 1] = ready_score(priorities[m], id)
        ranked_args[#ranked_args + 1] = id
      end
      state_args[#state_args + 1] = id
      state_args[#state_args + 1] = '0|0|' .. where
      if expiries[m] then
        expiry_args[#expiry_args + 1] = expiries[m]
        expiry_args[#expiry_args + 1] = id
      end
    end
    call_batched('HSET', d.state, state_args)
    if #ranked_args > 0 then
      call_batched('ZADD', d.rz, ranked_args)
      wake(d)
    end
    if #expiry_args > 0 then
      call_batched('ZADD', d.exp, expiry_args)
      due_by(DUE, ARGV[5 + i], first_expiry)
    end
  end
  redis.call('HINCRBY', USAGE, 'bytes', new_bytes)
  redis.call('HINCRBY', USAGE, 'messages', (#msg_args / 2) * ndest)
end
if marker_bytes > 0 then
  -- Buckets of a 32nd of the window (at least 1 s), so the ledger holds ~33 fields.
  local width = math.max(1000, math.floor(window / 32))
  local expiry = (math.floor((now + window) / width) + 1) * width
  redis.call('HINCRBY', LEDGER, expiry, marker_bytes)
  redis.call('HINCRBY', USAGE, 'markers', marker_bytes)
end
count('sent', new_count)
count_rate('s', new_count, now)
return ids
