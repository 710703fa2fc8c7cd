-- Sets or removes fields another front keeps in a queue's config hash (SQS's attributes and
-- tags), only while the queue exists: a call racing the queue's removal does not leave a
-- config hash without a queue behind.
-- KEYS[1..4]   doc, docp, docr, cfg
-- ARGV[1]      'set' (ARGV[4..] are field and value pairs) or 'del' (ARGV[4..] are fields)
-- ARGV[2]      a prefix of field names whose fields are counted
-- ARGV[3]      most fields of that prefix the hash may hold after the call (0: no bound)
-- Returns the number of fields of the prefix after the call; error NOQUEUE when the queue
-- does not exist, TOOMANYFIELDS <count> when the call would pass ARGV[3] (nothing changes then).

if not redis.call('HGET', CFG, 'model') then
  return redis.error_reply('NOQUEUE queue does not exist')
end
local prefix = ARGV[2]
local function counted()
  local n = 0
  for _, name in ipairs(redis.call('HKEYS', CFG)) do
    if string.sub(name, 1, #prefix) == prefix then n = n + 1 end
  end
  return n
end
if #ARGV < 4 then return counted() end
if ARGV[1] == 'del' then
  redis.call('HDEL', CFG, unpack(ARGV, 4))
  return counted()
end
local added = 0
for i = 4, #ARGV, 2 do
  if string.sub(ARGV[i], 1, #prefix) == prefix and redis.call('HEXISTS', CFG, ARGV[i]) == 0 then
    added = added + 1
  end
end
local most = tonumber(ARGV[3])
local after = counted() + added
if most > 0 and after > most then
  return redis.error_reply('TOOMANYFIELDS ' .. after)
end
redis.call('HSET', CFG, unpack(ARGV, 4))
return after
