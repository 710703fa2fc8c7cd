-- Deploys or redeploys a listener: its definition, and its state on first deploy.
-- KEYS[1..5]   definitions, stat, exec, pending, done (the listener's keys)
-- ARGV[1]      the listener's name
-- ARGV[2]      its definition (JSON)
-- ARGV[3]      most listeners a tenant may have
-- Returns 1 when the listener is new, 0 when it was redeployed, or the error TOOMANY.

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return redis.error_reply('TOOMANY')
end
local created = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'state', 'running', 'executions', 0, 'failures', 0, 'last_error', '')
end
return created
