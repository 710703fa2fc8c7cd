-- Stores a batch of messages and their documents, all or nothing.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5]      seq (the tenant's message counter)
-- KEYS[6]      subs (subscriber set; checked through cfg.subv)
-- KEYS[7..]    7 keys per destination (ARGV[2] destinations), then the de-duplication markers
-- ARGV[1]      the route the caller read: "<model>|<generation>|<subscriber version>"
--              (no subscriber version for point-to-point)
-- ARGV[2]      number of destinations
-- ARGV[3]      de-duplication window in ms
-- ARGV[4]      number of messages; then per message:
--              dedupe key index (0 = none), envelope JSON, document count,
--              then per document: data, properties JSON ("" = none)
-- Returns the message ids in order (a repeated dedupe id returns the original id),
-- or the error NOQUEUE, or STALESUBS when the route changed since the caller read it.

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
  dests[i] = dest_at(7 + (i - 1) * 7)
end
local dd_base = 7 + ndest * 7 - 1

local now = now_ms()
local seq = redis.call('INCRBY', KEYS[5], nmsg) - nmsg
local stamp = tostring(now)

local ids = {}
local doc_args, docp_args, docr_args, msg_args, all_args = {}, {}, {}, {}, {}
local pos = 5
for m = 1, nmsg do
  local dd = tonumber(ARGV[pos])
  local json = ARGV[pos + 1]
  local ndocs = tonumber(ARGV[pos + 2])
  pos = pos + 3
  seq = seq + 1
  local s = tostring(seq)
  local id = stamp .. '-' .. string.rep('0', 12 - #s) .. s
  local original = nil
  if dd > 0 then
    local key = KEYS[dd_base + dd]
    local marker = q.gen .. '|' .. id
    if not redis.call('SET', key, marker, 'PX', window, 'NX') then
      local old = redis.call('GET', key)
      local bar = string.find(old, '|', 1, true)
      if string.sub(old, 1, bar - 1) == q.gen then
        original = string.sub(old, bar + 1)
      else
        redis.call('SET', key, marker, 'PX', window)
      end
    end
  end
  if original then
    ids[m] = original
    pos = pos + ndocs * 2
  else
    ids[m] = id
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
      msg_args[#msg_args + 1] = ndocs .. '|' .. json
      all_args[#all_args + 1] = 0
      all_args[#all_args + 1] = id
    else
      pos = pos + ndocs * 2
    end
  end
end

if #msg_args > 0 then
  call_batched('HSET', DOC, doc_args)
  if #docp_args > 0 then call_batched('HSET', DOCP, docp_args) end
  if #docr_args > 0 then call_batched('HSET', DOCR, docr_args) end
  for _, d in ipairs(dests) do
    call_batched('HSET', d.msg, msg_args)
    call_batched('ZADD', d.all, all_args)
    local state_args = {}
    for i = 1, #msg_args, 2 do
      local id = msg_args[i]
      local entry = redis.call('XADD', d.ready, '*', 'm', id)
      state_args[#state_args + 1] = id
      state_args[#state_args + 1] = '0|0|r' .. entry
    end
    call_batched('HSET', d.state, state_args)
  end
end
return ids
