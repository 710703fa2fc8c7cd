-- One step of the upload of a staged send's documents (atomq.platform.queues.send_journal):
-- a request whose documents would hold its prepare too long uploads them first, whole messages
-- a call, a bounded number of them, into a hash of its own that expires, so a client that dies
-- mid-upload leaves nothing. The prepare (send.lua, ARGV[11]) checks the upload whole and makes
-- it its journal's.
-- KEYS[1]      the upload (send_keys.send_staging)
-- ARGV[1]      how long the upload is kept after this step, in ms
-- ARGV[2..]    field, value pairs: "<message>.<document>" its data, "<message>.<document>p"
--              its properties (none when it has none), the message and document counted from 1;
--              every document of a message in the one call
-- Besides them it writes per message "#<message>": "<data and properties' bytes>,<their usage
-- bytes>", which the prepare reads instead of measuring every document. Writing the same step
-- again writes the same (a retry's upload into the same hash).
-- Returns the fields the upload holds.

local given, sizes, order = {}, {}, {}
for i = 2, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  given[#given + 1], given[#given + 2] = field, value
  local m = string.match(field, '^(%d+)%.')
  local size = sizes[m]
  if not size then
    size = {0, 0}
    sizes[m] = size
    order[#order + 1] = m
  end
  size[1], size[2] = size[1] + #value, size[2] + DOC_BYTES + #value
end
for _, m in ipairs(order) do
  given[#given + 1], given[#given + 2] = '#' .. m, sizes[m][1] .. ',' .. sizes[m][2]
end
call_batched('HSET', KEYS[1], given)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return redis.call('HLEN', KEYS[1])
