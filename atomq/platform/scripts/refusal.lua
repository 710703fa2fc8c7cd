-- Counts a refused send in its tenant's totals of refusals, also while the store is at its
-- maxmemory (when most refusals happen): a script flagged to run there.
-- KEYS[1]      the tenant's refusals hash
-- ARGV[1]      the reason
return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
