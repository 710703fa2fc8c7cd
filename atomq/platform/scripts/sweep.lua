-- Moves due redeliveries to ready and fails expired deliveries (bounded).
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5..11]  the destination
-- KEYS[12]     the tenant's usage hash (ack time-outs may dead-letter)
-- ARGV[1]      redelivery delays in ms, comma-separated
-- ARGV[2]      at most this many of each kind
-- Returns the number of messages moved (ARGV[2] or more: call again).

local q = require_queue()
if q.err then return q end
return sweep_destination(dest_at(5), q, parse_delays(ARGV[1]), now_ms(), tonumber(ARGV[2]), KEYS[12])
