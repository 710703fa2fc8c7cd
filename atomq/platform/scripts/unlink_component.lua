-- First, atomic step of removing a queue or a subscriber: after it, sends and
-- gets no longer see the component, and the removal marker lets an
-- interrupted removal resume. The messages are dropped in chunks afterwards.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5]      the tenant's queue set
-- KEYS[6]      subs
-- KEYS[7]      the tenant's set of removals under way
-- ARGV[1]      queue | subscriber
-- ARGV[2]      queue name, or subscriber name
-- ARGV[3]      removal marker (the queue name, or "<queue>/<subscriber>")
-- Returns 1 when the component existed, else 0.

if ARGV[1] == 'queue' then
  if redis.call('EXISTS', CFG) == 0 then return 0 end
  redis.call('DEL', CFG)
  redis.call('SREM', KEYS[5], ARGV[2])
else
  if redis.call('SREM', KEYS[6], ARGV[2]) == 0 then return 0 end
  redis.call('HINCRBY', CFG, 'subv', 1)
end
redis.call('SADD', KEYS[7], ARGV[3])
return 1
