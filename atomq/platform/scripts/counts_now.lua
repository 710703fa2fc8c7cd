-- How a destination's messages stand at this moment by the store's clock, which a
-- sweep has not caught up with yet: a delivery past its deadline and a scheduled
-- message that is due are waiting to be taken again. Reads only (what SQS's
-- approximate counts read: atomq.api.sqs.queue_attributes).
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5..]    the destination (DEST_KEYS keys)
-- Returns {ready (waiting behind their group's head included), scheduled and due, scheduled
--          ahead, in flight past their deadline, in flight before it, delayed by their send
--          (due or not)}, or NOQUEUE.

local q = require_queue()
if q.err then return q end
local d = dest_at(5)
local now = now_ms()
return {redis.call('XLEN', d.ready) + redis.call('ZCARD', d.rz) + redis.call('ZCARD', d.gw),
        redis.call('ZCOUNT', d.sched, '-inf', now), redis.call('ZCOUNT', d.sched, '(' .. now, '+inf'),
        redis.call('ZCOUNT', d.inflight, '-inf', now), redis.call('ZCOUNT', d.inflight, '(' .. now, '+inf'),
        tonumber(redis.call('GET', d.delayed) or '0')}
