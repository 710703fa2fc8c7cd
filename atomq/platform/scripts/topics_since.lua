-- What changed in a tenant's topic patterns since the version a node's
-- matcher holds, read at once (so the patterns read are those of the version
-- returned).
-- KEYS[1]      the tenant's topic patterns (hash queue -> JSON list; #v the version)
-- KEYS[2]      their change log (list, newest first, of "<version>:<queue>": topics_changed)
-- ARGV[1]      the version the caller's matcher holds
-- Returns {version, 1, queue, patterns, ...}: each queue whose patterns
-- changed since ARGV[1], once, with its patterns now ("" for none), when the
-- log reaches back to ARGV[1]; else {version, 0}, and the caller reads them
-- all: the matcher is further behind than the log is long, or a change is
-- missing from the log (one an older atomq made, which logged none), or the
-- store is behind the matcher (its data replaced).

local version = redis.call('HGET', KEYS[1], '#v') or '0'
local behind = tonumber(version) - tonumber(ARGV[1])
if behind < 0 or behind > TOPIC_LOG_LENGTH then return {version, 0} end
local out, seen = {version, 1}, {}
if behind == 0 then return out end
local entries = redis.call('LRANGE', KEYS[2], 0, behind - 1)
if #entries < behind then return {version, 0} end
for i, entry in ipairs(entries) do
  local colon = string.find(entry, ':', 1, true)
  if tonumber(string.sub(entry, 1, colon - 1)) ~= tonumber(version) - i + 1 then return {version, 0} end
  local queue = string.sub(entry, colon + 1)
  if not seen[queue] then
    seen[queue] = true
    out[#out + 1] = queue
    out[#out + 1] = redis.call('HGET', KEYS[1], queue) or ''
  end
end
return out
