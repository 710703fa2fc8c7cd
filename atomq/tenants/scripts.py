"""The Lua scripts of the tenant store: check-and-change steps on one tenant's keys, and on the
index of tenant names.

Each touches only keys of one tenant (one cluster slot), or only the index, and gets them all in
``KEYS``. They live here as strings, not as ``.lua`` files, because only the
platform's scripts are shipped as package data. A tenant is *live* while its
record exists without the ``deleting`` mark that its removal sets first.
"""

from __future__ import annotations

_LIVE = """
local function live(record)
  return redis.call('EXISTS', record) == 1 and redis.call('HEXISTS', record, 'deleting') == 0
end
"""

ADD_KEY = _LIVE + """
-- Adds a key to a live tenant: its id to the tenant's set, its entry to the tenant's key table,
-- its SQS secret beside it.
-- KEYS[1] = aq:{T}:tenant   KEYS[2] = aq:{T}:apikeys   KEYS[3] = aq:{T}:apikeys:entries
-- KEYS[4] = aq:{T}:apikeys:sqs
-- ARGV[1] = key id   ARGV[2] = entry (<tenant id>|<digest>)   ARGV[3] = SQS secret access key
-- Returns 1 if added, 0 if the tenant already has that id, -1 if the tenant is not live.
if not live(KEYS[1]) then return -1 end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 0 end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
return 1
"""

SQS_READ = """
-- A key's entry and its SQS secret, read together (a revocation between two reads cannot split them).
-- KEYS[1] = the key's entry table   KEYS[2] = its SQS secret table (same slot)   ARGV[1] = key id
-- Returns {entry or false, secret or false}.
return {redis.call('HGET', KEYS[1], ARGV[1]), redis.call('HGET', KEYS[2], ARGV[1])}
"""

SQS_STORE_SECRET = """
-- Stores the SQS secret of a key issued before SQS credentials existed, if the key's entry is still
-- the one its holder just proved (a revocation meanwhile leaves nothing behind).
-- KEYS[1] = the key's entry table   KEYS[2] = its SQS secret table (same slot)
-- ARGV[1] = key id   ARGV[2] = the entry read   ARGV[3] = the secret
-- Returns 1 if stored (or already there), 0 if the entry changed.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[3])
return 1
"""

SET_ACCOUNT = _LIVE + """
-- Gives a live tenant its SQS account id, unless it has one already.
-- KEYS[1] = aq:{T}:tenant   ARGV[1] = the account id claimed for it
-- Returns the tenant's account id (ARGV[1] or the one it had), or false if the tenant is not live.
if not live(KEYS[1]) then return false end
redis.call('HSETNX', KEYS[1], 'sqs_account', ARGV[1])
return redis.call('HGET', KEYS[1], 'sqs_account')
"""

UPDATE = _LIVE + """
-- Changes fields of a live tenant's record and reads it back in the same step.
-- KEYS[1] = aq:{T}:tenant
-- ARGV    = field, value, field, value, ... (may be empty: then only a read)
-- Returns the name before the change, then the record as HGETALL does; or an empty list if the
-- tenant is not live.
if not live(KEYS[1]) then return {} end
local before = redis.call('HGET', KEYS[1], 'name') or ''
if #ARGV > 0 then redis.call('HSET', KEYS[1], unpack(ARGV)) end
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, before)
return out
"""

MARK_DELETING = """
-- Marks a tenant's record as being removed (again, if a removal was interrupted).
-- KEYS[1] = aq:{T}:tenant
-- Returns 1, or 0 if there is no record (the tenant never existed or is gone).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'deleting', '1')
return 1
"""

SWAP_NAME = """
-- Hands a tenant name from one holder to another, if it is still held as the caller read it.
-- KEYS[1] = aq:tenants:names
-- ARGV[1] = name   ARGV[2] = the holder read ('' for none)   ARGV[3] = the new holder ('' to free it)
-- Returns 1 if done, 0 if the name changed hands meanwhile.
if (redis.call('HGET', KEYS[1], ARGV[1]) or '') ~= ARGV[2] then return 0 end
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
return 1
"""
