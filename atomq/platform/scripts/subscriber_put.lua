-- Creates a subscriber of a publish/subscribe queue.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5]      subs
-- KEYS[6]      the tenant's set of removals under way
-- ARGV[1]      subscriber name; ARGV[2] its removal marker ("<queue>/<subscriber>")
-- Returns 1 created, 0 existed.

local q = require_queue()
if q.err then return q end
if q.model ~= 'publish_subscribe' then
  return redis.error_reply('SUBSCRIBERP2P a point-to-point queue has no subscribers')
end
if redis.call('SISMEMBER', KEYS[6], ARGV[2]) == 1 then
  return redis.error_reply('DELETING the subscriber is still being removed')
end
if redis.call('SADD', KEYS[5], ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', CFG, 'subv', 1)
return 1
