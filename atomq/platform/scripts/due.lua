-- What one tenant's maintenance round has to do now; also takes the bytes of
-- expired de-duplication markers off its usage. Reads indexes only, so an
-- idle tenant costs one call, however many queues it has.
-- KEYS[1]      the tenant's due index (destination -> earliest due time, ms)
-- KEYS[2]      the tenant's index of oldest messages (destination -> send time, ms)
-- KEYS[3]      the tenant's marker ledger (hash <expiry ms> -> bytes)
-- KEYS[4]      the tenant's usage hash (field markers)
-- KEYS[5]      the tenant's set of removals under way
-- KEYS[6]      the tenant's index of chunked sends under way (journal -> last step, ms)
-- KEYS[7]      the tenant's move tasks due (task id -> when its next step is due, ms)
-- ARGV[1]      the document retention in ms
-- ARGV[2]      at most this many destinations of each kind
-- ARGV[3]      how long a chunked send may go untouched before the maintenance finishes it (ms)
-- Returns {due destinations, destinations holding messages past the retention,
--          removals under way, marker bytes taken off, chunked sends left untouched,
--          move tasks due}.

local now = now_ms()
local limit = tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - tonumber(ARGV[1])), 'LIMIT', 0, limit)
local removals = redis.call('SMEMBERS', KEYS[5])
local raw = redis.call('HGETALL', KEYS[3])
local freed, expired = 0, {}
for i = 1, #raw, 2 do
  if tonumber(raw[i]) <= now then
    freed = freed + tonumber(raw[i + 1])
    expired[#expired + 1] = raw[i]
  end
end
if #expired > 0 then
  redis.call('HDEL', KEYS[3], unpack(expired))
  redis.call('HINCRBY', KEYS[4], 'markers', -freed)
end
local stale = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now - tonumber(ARGV[3]), 'LIMIT', 0, limit)
local moves = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now, 'LIMIT', 0, limit)
return {due, old, removals, freed, stale, moves}
