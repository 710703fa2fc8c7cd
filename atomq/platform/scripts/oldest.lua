-- Sets a destination's score in the index of oldest messages to the send time
-- of its oldest message, or takes it out when it holds none; run after the
-- retention purge drained it. One script, so a send that lands meanwhile
-- (which adds the destination only when it is absent) is never left out.
-- KEYS[1]      the destination's browse index (all: ids in send order)
-- KEYS[2]      the tenant's index of oldest messages
-- ARGV[1]      the destination's name in the index
-- Returns the new score, or -1 when the destination left the index.

local first = redis.call('ZRANGE', KEYS[1], 0, 0)
if #first == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return -1
end
local sent = tonumber(string.sub(first[1], 1, string.find(first[1], '-', 1, true) - 1))
redis.call('ZADD', KEYS[2], sent, ARGV[1])
return sent
