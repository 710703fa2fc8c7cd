-- Records a change of the memory state seen by a node, once however many nodes see it.
-- KEYS[1]      the state's hash: state -> the current state, n:<state> -> changes to it
-- KEYS[2]      the history: a list of "<ms>|<state>|<used bytes>|<max bytes>", newest first
-- ARGV[1..3]   the state, and the store's used and max memory it was judged on
-- ARGV[4]      changes the history keeps
-- Returns 1 when this call changed the recorded state, 0 when it was already recorded.

if redis.call('HGET', KEYS[1], 'state') == ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'n:' .. ARGV[1], 1)
redis.call('LPUSH', KEYS[2], now_ms() .. '|' .. ARGV[1] .. '|' .. ARGV[2] .. '|' .. ARGV[3])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[4]) - 1)
return 1
