-- The atomic step of removing a queue or a subscriber: its destinations'
-- keys move to a removal namespace, so the name is free at once (a new
-- queue or subscriber of that name starts empty, on fresh keys), and the
-- removal marker lets the chunked drop of the moved messages resume after
-- a crash.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5]      the tenant's queue set
-- KEYS[6]      subs
-- KEYS[7]      the tenant's set of removals under way
-- KEYS[8]      the tenant's due index
-- KEYS[9]      the tenant's index of oldest messages
-- KEYS[10]     the tenant's topic patterns (a removed queue attracts nothing)
-- KEYS[11]     their change log (topics_changed)
-- KEYS[12..]   per destination, its DEST_KEYS keys, then the DEST_KEYS keys it moves to
-- ARGV[1]      queue | subscriber
-- ARGV[2]      the queue's name, or the subscriber's
-- ARGV[3]      queue: the route the caller read ("<model>|<gen>|<subscriber version>")
-- ARGV[4]      the removal marker ("<removal id>:<destination count>")
-- ARGV[5..]    the destinations' names in the indexes, which no longer name them
-- Returns 1 when the component existed, 0 when it did not; error STALESUBS
-- when the queue's subscribers changed since the caller read them.

local ndest = (#KEYS - 11) / (2 * DEST_KEYS)
if ARGV[1] == 'queue' then
  local q = redis.call('HMGET', CFG, 'model', 'gen', 'subv')
  if not q[1] then return 0 end
  if q[1] .. '|' .. q[2] .. '|' .. q[3] ~= ARGV[3] then
    return redis.error_reply('STALESUBS the queue model or its subscribers changed')
  end
  redis.call('DEL', CFG, KEYS[6])
  redis.call('SREM', KEYS[5], ARGV[2])
  local held = redis.call('HGET', KEYS[10], ARGV[2])
  if held then
    redis.call('HDEL', KEYS[10], ARGV[2])
    topics_changed(KEYS[10], KEYS[11], ARGV[2])
    local total = tonumber(redis.call('HGET', KEYS[10], '#n') or '-1')
    if total >= 0 and held ~= '[]' then
      local _, commas = string.gsub(held, ',', ',')  -- the patterns it held: see queue_put.lua
      redis.call('HSET', KEYS[10], '#n', math.max(0, total - commas - 1))
    end
  end
else
  if redis.call('SREM', KEYS[6], ARGV[2]) == 0 then return 0 end
  redis.call('HINCRBY', CFG, 'subv', 1)
end
for i = 0, ndest - 1 do
  redis.call('ZREM', KEYS[8], ARGV[5 + i])
  redis.call('ZREM', KEYS[9], ARGV[5 + i])
  local base = 12 + i * 2 * DEST_KEYS
  for j = 0, DEST_KEYS - 1 do
    if redis.call('EXISTS', KEYS[base + j]) == 1 then
      redis.call('RENAME', KEYS[base + j], KEYS[base + DEST_KEYS + j])
    end
  end
end
redis.call('SADD', KEYS[7], ARGV[4])
return 1
