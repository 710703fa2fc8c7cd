-- Moves due redeliveries and delayed copies to ready and fails expired deliveries (bounded), then
-- sets the destination's score in the due index to when it next falls due.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5..]    the destination (DEST_KEYS keys), then from KEYS[EXTRA] on:
-- KEYS[EXTRA]     the tenant's usage hash (ack time-outs may dead-letter)
-- KEYS[EXTRA + 1] the tenant's due index
-- KEYS[EXTRA + 2] the tenant's index of oldest messages
-- KEYS[EXTRA + 3] the tenant's message counter (delayed copies that fall due take a number)
-- KEYS[EXTRA + 4..] the queue's dead_letter_queue's keys, when it names one (dead_letter_target)
-- ARGV[1]      redelivery delays in ms, comma-separated
-- ARGV[2]      at most this many of each kind
-- ARGV[3]      the destination's name in the indexes ("" for none)
-- Returns the number of messages moved (ARGV[2] or more: call again), or
-- NOQUEUE, after taking the destination out of both indexes.

local member = ARGV[3]
local q = require_queue()
if q.err then
  if member ~= '' then
    redis.call('ZREM', KEYS[EXTRA + 1], member)
    redis.call('ZREM', KEYS[EXTRA + 2], member)
  end
  return q
end
local stale = dead_letter_target(q, EXTRA + 4, member)
if stale then return stale end
local d = dest_at(5)
local moved = sweep_destination(d, q, parse_delays(ARGV[1]), now_ms(), tonumber(ARGV[2]), KEYS[EXTRA],
                                KEYS[EXTRA + 3])
if member ~= '' then
  local first = next_due(d)
  if first then
    redis.call('ZADD', KEYS[EXTRA + 1], first, member)
  else
    redis.call('ZREM', KEYS[EXTRA + 1], member)
  end
end
return moved
