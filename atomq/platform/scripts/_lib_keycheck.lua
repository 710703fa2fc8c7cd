-- The request's API key check, carried by this script (the keyed form of a message route's
-- script: atomq.platform.store.carried_check), put before everything else, the shared parts too.
-- The caller appended to the script's own KEYS and ARGV:
-- KEYS[#KEYS]      the hash of the key's entry (keys.api_key_table: in the tenant's slot)
-- ARGV[#ARGV - 1]  the key id
-- ARGV[#ARGV]      the entry the presented key makes: "<tenant id>|<SHA-256 of the key>"
-- They are taken off again here, so the script's own code finds KEYS and ARGV as it always does.
-- An entry that is missing or another (an unknown, revoked or wrong key, or a key of another
-- tenant) refuses the call with NOKEY before anything else is read or written.
do
  local last_key, last_arg = #KEYS, #ARGV
  local entry = redis.call('HGET', KEYS[last_key], ARGV[last_arg - 1])
  local expected = ARGV[last_arg]
  KEYS[last_key], ARGV[last_arg], ARGV[last_arg - 1] = nil, nil, nil
  if entry ~= expected then
    return redis.error_reply('NOKEY')
  end
end
