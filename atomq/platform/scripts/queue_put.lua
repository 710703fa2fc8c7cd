-- Creates or updates a queue component.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5]      the tenant's queue set
-- KEYS[6]      subs
-- KEYS[7]      the point-to-point destination's msg hash
-- KEYS[8]      seq (the tenant's counter: a new queue's generation comes from it)
-- KEYS[9]      the tenant's topic patterns (hash queue -> JSON list; #v the version)
-- KEYS[10]     their change log (topics_changed)
-- KEYS[11]     the tenant's hash of copies stepped sends still owe (send.lua's pending hash)
-- KEYS[12]     the cfg of the queue a setting dlq_to (the queue's dead_letter_queue) names, when the
--              call sets one
-- ARGV[1..2]   name, model
-- ARGV[3..4]   max_redeliveries, ack_timeout_ms of a new queue that names neither
-- ARGV[5]      most queues the tenant may have
-- ARGV[6]      the queue's topic patterns as a JSON list, "[]" for none, "" to keep them
-- ARGV[7]      most topic patterns the tenant's queues may attract together
-- ARGV[8..]    more settings to store, field and value pairs (those a caller names;
--              the others keep what they hold)
-- Returns 1 created, 0 updated; error CONFLICT for a model change of a queue
-- that holds messages or subscribers, LASTVALUEPUBSUB or EXCLUSIVEPUBSUB for a
-- publish/subscribe queue that would be a last-value or exclusive queue, EXCLUSIVEDELAY for an
-- exclusive queue with a delay (delay_ms: it delivers in send order), TOOMANYQUEUES for a new queue past ARGV[5],
-- ORDERPENDING for a queue made exclusive or group-ordered while a stepped send still owes it copies (its
-- prepare, to a queue not ordered then, named it in no owed set: a send after the change would land
-- before that send's earlier messages; it finishes within seconds),
-- TOOMANYPATTERNS <total> when the tenant's queues would attract more patterns than ARGV[7]
-- (their count is kept in the patterns hash's #n, counted once where an older atomq kept none).
-- A dead_letter_queue set must name a point-to-point queue that is not a last-value queue and whose
-- dlq_sources (absent or "*": any; "": none; else "|<name>|<name>|") takes this queue's dead letters:
-- DLQNOQUEUE, DLQPUBSUB, DLQLASTVALUE or DLQDENIED else.
-- The generation tells one life of a name from the next: routes and
-- de-duplication markers of a removed queue never apply to its successor.

local model = redis.call('HGET', CFG, 'model')
if not model and redis.call('SCARD', KEYS[5]) >= tonumber(ARGV[5]) then
  return redis.error_reply('TOOMANYQUEUES the tenant has its most queues')
end
if model and model ~= ARGV[2] then
  if redis.call('HLEN', KEYS[7]) > 0 or redis.call('SCARD', KEYS[6]) > 0 then
    return redis.error_reply('CONFLICT the model of a queue that holds messages or subscribers cannot change')
  end
end
-- Last-value and exclusive queues are point-to-point, whether the PUT names
-- the setting or the queue keeps it.
local kept = redis.call('HMGET', CFG, 'lv', 'access', 'delay_ms', 'ordering', 'gen')
local last_value, access, delay, ordering = kept[1], kept[2], kept[3], kept[4]
for i = 8, #ARGV, 2 do
  if ARGV[i] == 'lv' then last_value = ARGV[i + 1] end
  if ARGV[i] == 'access' then access = ARGV[i + 1] end
  if ARGV[i] == 'ordering' then ordering = ARGV[i + 1] end
  if ARGV[i] == 'delay_ms' then delay = ARGV[i + 1] end
end
if access == 'exclusive' and tonumber(delay or '0') > 0 then
  return redis.error_reply('EXCLUSIVEDELAY an exclusive queue delivers in send order: it delays no message')
end
if ARGV[2] == 'publish_subscribe' and last_value == '1' then
  return redis.error_reply('LASTVALUEPUBSUB a last-value queue is point-to-point')
end
if ARGV[2] == 'publish_subscribe' and access == 'exclusive' then
  return redis.error_reply('EXCLUSIVEPUBSUB an exclusive queue is point-to-point')
end
if model and kept[2] ~= 'exclusive' and kept[4] ~= 'group' and (access == 'exclusive' or ordering == 'group') then
  local members = {ARGV[1]}
  if model == 'publish_subscribe' then
    members = {}
    -- Each subscriber's name in the indexes and the pending hash ("<queue>/<subscriber>", as
    -- keys.DestinationKeys.member names it), read here with the subscribers in the same step.
    for _, sub in ipairs(redis.call('SMEMBERS', KEYS[6])) do members[#members + 1] = ARGV[1] .. '/' .. sub end
  end
  for _, member in ipairs(members) do
    if redis.call('HEXISTS', KEYS[11], member .. '|' .. kept[5]) == 1 then
      return redis.error_reply('ORDERPENDING a stepped send still owes the queue copies')
    end
  end
end
-- A JSON list of patterns holds no comma but between them (a pattern has none).
local function pattern_count(list)
  if list == '[]' then return 0 end
  local _, commas = string.gsub(list, ',', ',')
  return commas + 1
end
local target = nil
for i = 8, #ARGV, 2 do
  if ARGV[i] == 'dlq_to' and ARGV[i + 1] ~= '' then target = KEYS[12] end
end
if target then
  local t = redis.call('HMGET', target, 'model', 'lv', 'dlq_sources')
  if not t[1] then return redis.error_reply('DLQNOQUEUE the dead letter queue does not exist') end
  if t[1] ~= 'point_to_point' then return redis.error_reply('DLQPUBSUB the dead letter queue is publish/subscribe') end
  if t[2] == '1' then return redis.error_reply('DLQLASTVALUE the dead letter queue is a last-value queue') end
  if t[3] and t[3] ~= '*' and not string.find(t[3], '|' .. ARGV[1] .. '|', 1, true) then
    return redis.error_reply('DLQDENIED the dead letter queue does not take this queue\'s dead letters')
  end
end
local held_patterns = redis.call('HGET', KEYS[9], ARGV[1]) or '[]'
local patterns_total
if ARGV[6] ~= '' and held_patterns ~= ARGV[6] then
  patterns_total = tonumber(redis.call('HGET', KEYS[9], '#n') or '-1')
  if patterns_total < 0 then
    patterns_total = 0
    local all = redis.call('HGETALL', KEYS[9])
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, 1) ~= '#' then patterns_total = patterns_total + pattern_count(all[i + 1]) end
    end
  end
  patterns_total = patterns_total - pattern_count(held_patterns) + pattern_count(ARGV[6])
  if patterns_total > tonumber(ARGV[7]) and pattern_count(ARGV[6]) > pattern_count(held_patterns) then
    return redis.error_reply('TOOMANYPATTERNS ' .. patterns_total)
  end
end
redis.call('HSET', CFG, 'model', ARGV[2])
if not model then redis.call('HSET', CFG, 'max_redeliveries', ARGV[3], 'ack_timeout_ms', ARGV[4]) end
if #ARGV > 7 then redis.call('HSET', CFG, unpack(ARGV, 8)) end
if patterns_total then
  if ARGV[6] == '[]' then
    redis.call('HDEL', KEYS[9], ARGV[1])
  else
    redis.call('HSET', KEYS[9], ARGV[1], ARGV[6])
  end
  redis.call('HSET', KEYS[9], '#n', patterns_total)
  topics_changed(KEYS[9], KEYS[10], ARGV[1])
end
if model then return 0 end
redis.call('HSET', CFG, 'gen', redis.call('INCR', KEYS[8]), 'subv', 0)
redis.call('SADD', KEYS[5], ARGV[1])
return 1
