-- Drops the records of nodes not heard from for long (atomq.platform.watch.nodes), each only if it is
-- still the record that was read: a node that wrote its record again meanwhile keeps it.
-- KEYS[1]      the nodes' records (hash: node id -> record)
-- ARGV         pairs: a node's id, its record as it was read
-- Returns how many records were dropped.

local dropped = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    dropped = dropped + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return dropped
