-- Ends, fails or extends deliveries of in-flight messages: ack, nack and extend.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5..11]  the destination
-- ARGV[1]      action: ack | nack | extend
-- ARGV[2]      action argument: nack reason, or extension in ms
-- ARGV[3]      redelivery delays in ms, comma-separated (nack)
-- ARGV[4]      selector mode: id | receipt
-- ARGV[5..]    message ids or receipts ("<id>~<delivery count>")
-- Only a message in flight is touched, and with a receipt only the delivery
-- that receipt was issued for. Returns {done, dead} (dead: nack only).

local q = require_queue()
if q.err then return q end
local d = dest_at(5)
local action = ARGV[1]
local now = now_ms()
local delays = parse_delays(ARGV[3])
-- A delivery past its deadline has failed, whether or not a sweep saw it yet.
sweep_destination(d, q, delays, now, 1000)
local done, dead = 0, 0
for _, sel in ipairs(selected(ARGV[4], 5)) do
  local id, want = sel[1], sel[2]
  local s = redis.call('HGET', d.state, id)
  if s then
    local dc, fails, where = parse_state(s)
    if where == 'f' and (not want or want == dc) then
      if action == 'ack' then
        redis.call('ZREM', d.inflight, id)
        forget(d, id)
        done = done + 1
      elseif action == 'nack' then
        if fail_delivery(d, q, delays, id, dc, fails, ARGV[2], now) == 'dead' then
          dead = dead + 1
        else
          done = done + 1
        end
      else
        redis.call('ZADD', d.inflight, 'XX', now + tonumber(ARGV[2]), id)
        done = done + 1
      end
    end
  end
end
return {done, dead}
