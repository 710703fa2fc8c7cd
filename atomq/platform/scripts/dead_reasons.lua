-- The reasons a destination's newest dead letters were given, with how many of them each.
-- Read only. There is no index of reasons (a reason is any consumer's nack reason); the dead
-- letter queue stream holds each dead letter's, so a bounded read of its newest entries counts them.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5..]    the destination (DEST_KEYS keys)
-- ARGV[1]      the most dead letters to read, newest first
-- ARGV[2]      the most reasons to answer (the most frequent)
-- Returns {dead letters read, dead letters in all, reasons found, then per reason answered:
--          reason, count}, the most frequent first, then by reason. A dead letter without a
--          reason is counted as read and under no reason.

local q = require_queue()
if q.err then return q end
local d = dest_at(5)
local most, shown = tonumber(ARGV[1]), tonumber(ARGV[2])
local chunk = 200
local counts, reasons, read, top = {}, {}, 0, '+'
while read < most do
  local want = math.min(chunk, most - read)
  local entries = redis.call('XREVRANGE', d.dlq, top, '-', 'COUNT', want)
  for _, e in ipairs(entries) do
    local _, reason = dead_letter_fields(e[2])
    if reason and reason ~= '' then
      if not counts[reason] then reasons[#reasons + 1] = reason end
      counts[reason] = (counts[reason] or 0) + 1
    end
  end
  read = read + #entries
  if #entries < want then break end
  top = '(' .. entries[#entries][1]
end
table.sort(reasons, function(a, b)
  if counts[a] ~= counts[b] then return counts[a] > counts[b] end
  return a < b
end)
local out = {read, redis.call('XLEN', d.dlq), #reasons}
for i = 1, math.min(shown, #reasons) do
  out[#out + 1] = reasons[i]
  out[#out + 1] = counts[reasons[i]]
end
return out
