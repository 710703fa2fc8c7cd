-- Deploys or redeploys a listener: its definition, and its state on first deploy.
-- KEYS[1..5]   definitions, stat, exec, pending, done (the listener's keys)
-- KEYS[6]      the tenant's count of Spark listeners
-- ARGV[1]      the listener's name
-- ARGV[2]      its definition (JSON)
-- ARGV[3]      most listeners a tenant may have
-- ARGV[4]      its engine (fork | spark)
-- Returns 1 when the listener is new, 0 when it was redeployed, or the error TOOMANY.

local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return redis.error_reply('TOOMANY')
end
local was_spark = old and cjson.decode(old).engine == 'spark'
local is_spark = ARGV[4] == 'spark'
if is_spark and not was_spark then
  redis.call('INCR', KEYS[6])
elseif was_spark and not is_spark and tonumber(redis.call('GET', KEYS[6]) or '0') > 0 then
  redis.call('DECR', KEYS[6])
end
local created = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'state', 'running', 'executions', 0, 'failures', 0, 'last_error', '')
end
return created
