-- Takes the bytes of expired de-duplication markers off the tenant's usage.
-- KEYS[1]      the tenant's marker ledger: hash <expiry ms> -> bytes of the markers
--              that expire by then (written by send.lua)
-- KEYS[2]      the tenant's usage hash (field markers)
-- Returns {bytes taken off, the ledger's next expiry in ms or -1}.

local now = now_ms()
local raw = redis.call('HGETALL', KEYS[1])
local freed, due, next_at = 0, {}, -1
for i = 1, #raw, 2 do
  local at = tonumber(raw[i])
  if at <= now then
    freed = freed + tonumber(raw[i + 1])
    due[#due + 1] = raw[i]
  elseif next_at < 0 or at < next_at then
    next_at = at
  end
end
if #due > 0 then
  redis.call('HDEL', KEYS[1], unpack(due))
  redis.call('HINCRBY', KEYS[2], 'markers', -freed)
end
return {freed, next_at}
