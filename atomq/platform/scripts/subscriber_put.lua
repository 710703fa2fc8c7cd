-- Creates a subscriber of a publish/subscribe queue.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5]      subs
-- ARGV[1]      subscriber name
-- ARGV[2]      most subscribers a queue may have
-- Returns 1 created, 0 existed.

local q = require_queue()
if q.err then return q end
if q.model ~= 'publish_subscribe' then
  return redis.error_reply('SUBSCRIBERP2P a point-to-point queue has no subscribers')
end
return add_subscriber(KEYS[5], ARGV[1], tonumber(ARGV[2]))
