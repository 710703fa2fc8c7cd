-- One step of the release of a wide send's reservation (send_reserve.lua) that no prepare made its
-- journal: the request was refused, answered without storing (every message a repeat), or died
-- (the maintenance releases a reservation left untouched). Releases the last reserved
-- destinations, at most ARGV[1] of them, and deletes the reservation after the first.
-- KEYS[1]      the reservation
-- KEYS[2]      the tenant's index of journals
-- KEYS[3]      the tenant's pending hash (_lib_send.lua)
-- KEYS[4]      the tenant's ordered destinations owed by chunked sends (send_keys.send_owed), where
--              the reservation's name leaves each released destination
-- ARGV[1]      the most destinations this step releases
-- ARGV[2]      the reservation's name in the index
-- Marks the reservation as being released (x), so no step reserves more in it; leaves its score in
-- the index as it was, so the maintenance goes on with a release its caller left. Returns the
-- destinations still reserved (0: none; the reservation is gone).

local RESERVATION, JOURNALS, PENDING, OWED = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local own = string.sub(ARGV[2], #'r.' + 1)  -- the reservation's name (send_keys.reservation_name)
local reserved = redis.call('HGET', RESERVATION, 'c')
if not reserved then
  redis.call('ZREM', JOURNALS, ARGV[2])
  return 0
end
local top = tonumber(reserved)
local low = math.max(0, top - tonumber(ARGV[1]))
local names = {}
for i = low + 1, top do names[#names + 1] = 'd' .. i end
local n, b = string.match(redis.call('HGET', RESERVATION, 'rv'), '^(%d+)|(%d+)$')
for _, raw in ipairs(hmget_batched(RESERVATION, names)) do
  local _, gen, member = string.match(raw, '^(%d+)|([^|]*)|(.*)$')
  pend(PENDING, member, gen, -tonumber(n), -tonumber(b))
  redis.call('ZREM', OWED, member .. '|' .. own)
end
if low == 0 then
  redis.call('UNLINK', RESERVATION)  -- freed off the store's thread: it may list 100,000 destinations
  redis.call('ZREM', JOURNALS, ARGV[2])
  return 0
end
if #names > 0 then call_batched('HDEL', RESERVATION, names) end
redis.call('HSET', RESERVATION, 'c', low, 'x', 1)
return low
