-- A rate-limit window: opens at the first counted request and lasts
-- ARGV[3] ms; past ARGV[2] requests in it, requests are refused until it closes.
-- KEYS[1]      the window (hash: start ms, count)
-- ARGV[1]      take | give
-- ARGV[2]      the limit (take)
-- ARGV[3]      the window's length in ms (take)
-- ARGV[4]      give: the window (its start) the room was taken in
-- take returns {1, window start} when counted, {0, ms until the window closes} when refused;
-- give hands back one request's room, only to the window it was taken in.

local start = tonumber(redis.call('HGET', KEYS[1], 'start'))
if ARGV[1] == 'give' then
  if start and tostring(start) == ARGV[4] then
    redis.call('HINCRBY', KEYS[1], 'count', -1)
  end
  return {1, 0}
end
local now = now_ms()
local length = tonumber(ARGV[3])
if not start or now >= start + length then
  redis.call('HSET', KEYS[1], 'start', now, 'count', 1)
  redis.call('PEXPIRE', KEYS[1], length)
  return {1, tostring(now)}
end
if tonumber(redis.call('HGET', KEYS[1], 'count')) >= tonumber(ARGV[2]) then
  return {0, start + length - now}
end
redis.call('HINCRBY', KEYS[1], 'count', 1)
return {1, tostring(start)}
