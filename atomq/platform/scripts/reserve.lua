-- Reserves room under the server's limits for a send about to be stored, or refuses it: what
-- keeps max_messages and max_disk_bytes exact under racing sends, whose tenants' counters live
-- in slots no one script can read together.
-- KEYS[1]      the server's reservations (hash "<100 ms bucket>:m" / ":b" -> message copies /
--              bytes reserved in that bucket)
-- ARGV[1..2]   the send's copies and bytes
-- ARGV[3..4]   the messages and bytes all tenants store, as a node last summed them
-- ARGV[5]      ms since the epoch (store time) from which reservations may be missing from
--              those sums: the sum's start, less the longest a send takes to be stored
-- ARGV[6..7]   max_messages and max_disk_bytes (0: none)
-- Returns 1, or the error SERVERFULL <setting> <held> with what the setting counts as held.
-- A reservation counts until a node's sums are sure to hold what it reserved (older buckets are
-- dropped after a minute), so near the limit a send may be refused for a few seconds early; a
-- send is never let past it.

local t = redis.call('TIME')
local bucket = math.floor((tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) / 100)
local since = math.floor(tonumber(ARGV[5]) / 100)
local m, b, gone = 0, 0, {}
local held = redis.call('HGETALL', KEYS[1])
for i = 1, #held, 2 do
  local at = tonumber(string.sub(held[i], 1, -3))
  if at < bucket - 600 then
    gone[#gone + 1] = held[i]
  elseif at >= since then
    if string.sub(held[i], -1) == 'm' then m = m + tonumber(held[i + 1]) else b = b + tonumber(held[i + 1]) end
  end
end
if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
local copies, bytes = tonumber(ARGV[1]), tonumber(ARGV[2])
local max_m, max_b = tonumber(ARGV[6]), tonumber(ARGV[7])
local held_m, held_b = tonumber(ARGV[3]) + m, tonumber(ARGV[4]) + b
if max_m > 0 and held_m + copies > max_m then
  return redis.error_reply(string.format('SERVERFULL max_messages %.0f', held_m))
end
if max_b > 0 and held_b + bytes > max_b then
  return redis.error_reply(string.format('SERVERFULL max_disk_bytes %.0f', held_b))
end
redis.call('HINCRBY', KEYS[1], bucket .. ':m', copies)
redis.call('HINCRBY', KEYS[1], bucket .. ':b', bytes)
redis.call('PEXPIRE', KEYS[1], 120000)
return 1
