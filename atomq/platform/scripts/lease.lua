-- Takes, renews or gives up a lease: one holder at a time, for a time.
-- KEYS[1]      the lease
-- ARGV[1]      acquire | release
-- ARGV[2]      the holder's id
-- ARGV[3]      time to live in ms (acquire)
-- Returns 1 when the caller holds the lease (acquire) or gave it up (release), else 0.

local holder = redis.call('GET', KEYS[1])
if ARGV[1] == 'release' then
  if holder == ARGV[2] then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
if holder == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
