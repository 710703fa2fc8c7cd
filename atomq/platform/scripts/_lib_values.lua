-- Shared prelude, part 3 of 7 (atomq.platform.scripts.LIB_PARTS): Last-value queues, forgetting message copies and what a copy costs a destination's limits.
-- Last-value queues. A message's key is the value of the queue's
-- last_value_key property (text as it is, another JSON value as its JSON; ""
-- when the message lacks it, or when the queue names no property). The lv hash
-- keeps k:<key> -> the newest message of that key, and i:<id> -> its key,
-- marked x instead of = once a newer one arrived while it was in flight: it is
-- then dropped instead of coming back (fail_delivery, release).

-- The key of a message of a last-value queue keyed by property `prop`
-- (envelope JSON `env`).
local function last_value_key(prop, env)
  if prop == '' then return '' end
  local props = cjson.decode(env)['p']
  local v = type(props) == 'table' and props[prop] or nil
  if v == nil or v == cjson.null then return '' end
  if type(v) == 'string' then return v end
  return cjson.encode(v)
end

-- Forgets the last-value entries of messages leaving; returns the bytes they counted.
local function forget_last_values(d, ids)
  local fields = {}
  for i, id in ipairs(ids) do fields[i] = 'i:' .. id end
  local marks = hmget_batched(d.lv, fields)
  local gone, freed = {}, 0
  for i, id in ipairs(ids) do
    local mark = marks[i]
    if mark then
      gone[#gone + 1] = fields[i]
      local key = string.sub(mark, 2)
      freed = freed + LAST_VALUE_BYTES + 2 * #key
      if string.sub(mark, 1, 1) == '=' and redis.call('HGET', d.lv, 'k:' .. key) == id then
        gone[#gone + 1] = 'k:' .. key
      end
    end
  end
  if #gone > 0 then call_batched('HDEL', d.lv, gone) end
  return freed
end

-- Whether an in-flight message of a last-value queue was superseded meanwhile
-- (also after the queue stopped being one: it must not come back beside the newer).
local function superseded_in_flight(d, id)
  local mark = redis.call('HGET', d.lv, 'i:' .. id)
  return mark ~= false and string.sub(mark, 1, 1) == 'x'
end

-- Forgets message copies and releases their documents; frees each document
-- whose last reference this was, and takes what it freed off the tenant's
-- usage (hash `usage`: bytes, messages), counted as the send counted it
-- (see atomq.platform.queues.footprint), plus `extra` bytes the caller freed
-- (dead-letter reasons). DOCR holds a count only while it is above one
-- (documents of several subscribers' copies); no entry means one. `dead`:
-- the copies are dead letters, which the destination's held bytes no longer
-- count; else their message_bytes come off them, and a group's head makes way for its next.
local function forget(d, ids, usage, extra, dead)
  if #ids == 0 then return end
  if redis.call('EXISTS', d.lv) == 1 then extra = (extra or 0) + forget_last_values(d, ids) end
  local envs = hmget_batched(d.msg, ids)
  if not dead then groups_leave(d, ids, envs) end
  call_batched('HDEL', d.msg, ids)
  call_batched('HDEL', d.state, ids)
  call_batched('ZREM', d.all, ids)
  if redis.call('EXISTS', d.exp) == 1 then call_batched('ZREM', d.exp, ids) end
  local docs, freed, copies, held = {}, extra or 0, 0, 0
  for i, id in ipairs(ids) do
    if envs[i] then
      copies = copies + 1
      freed = freed + COPY_BYTES + #envs[i]
      held = held + #envs[i]
      for k = 1, doc_count(envs[i]) do docs[#docs + 1] = id .. '.' .. k end
    end
  end
  redis.call('HINCRBY', usage, 'messages', -copies)
  -- No reference counts at all (a tenant whose messages each reached one queue): none to read.
  local refs = #docs > 0 and redis.call('EXISTS', DOCR) == 1 and hmget_batched(DOCR, docs) or {}
  local keep, drop, counted = {}, {}, {}
  local props_kept = has_props()
  for i, doc in ipairs(docs) do
    local r = tonumber(refs[i])
    if r and r > 2 then
      keep[#keep + 1] = doc
      keep[#keep + 1] = r - 1
    elseif r == 2 then
      counted[#counted + 1] = doc
    else
      drop[#drop + 1] = doc
    end
    if r and not dead then
      held = held + redis.call('HSTRLEN', DOC, doc) + (props_kept and redis.call('HSTRLEN', DOCP, doc) or 0)
    end
  end
  if #keep > 0 then call_batched('HSET', DOCR, keep) end
  if #counted > 0 then call_batched('HDEL', DOCR, counted) end
  if #drop > 0 then
    for _, doc in ipairs(drop) do
      local data = redis.call('HSTRLEN', DOC, doc)
      local props = props_kept and redis.call('HSTRLEN', DOCP, doc) or 0
      freed = freed + DOC_BYTES + data
      if props > 0 then freed = freed + DOC_BYTES + props end
      held = held + data + props
    end
    call_batched('HDEL', DOC, drop)
    if props_kept then call_batched('HDEL', DOCP, drop) end
  end
  redis.call('HINCRBY', usage, 'bytes', -freed)
  if not dead and held > 0 then redis.call('DECRBY', d.held, held) end
end

-- A message copy's bytes as a destination's limits count them: its stored
-- envelope (head and JSON) and its documents' data and properties.
local function message_bytes(d, id)
  local env = redis.call('HGET', d.msg, id)
  local size = #env
  local props_kept = has_props()
  for k = 1, doc_count(env) do
    local doc = id .. '.' .. k
    size = size + redis.call('HSTRLEN', DOC, doc) + (props_kept and redis.call('HSTRLEN', DOCP, doc) or 0)
  end
  return size
end

-- The copies a destination holds that are neither acked nor dead.
local function held_count(d)
  return redis.call('HLEN', d.state) - redis.call('XLEN', d.dlq)
end

-- The copies and bytes chunked sends still owe destination `member` of queue generation `gen`
-- (the tenant's hash `pending`: see _lib_send.lua), which its limits count as held.
local function pending_of(pending, member, gen)
  local p = redis.call('HMGET', pending, member .. '|' .. gen, member .. '|' .. gen .. '|b')
  return tonumber(p[1] or '0'), tonumber(p[2] or '0')
end

-- Takes message `id` of a last-value queue as the newest of its key: the
-- waiting (ready or scheduled) message of that key is gone, counted
-- superseded in the queue of `cfg`; one in flight is marked to be dropped if
-- it fails. A resent dead letter arrives again with the entry it kept.
local function last_value_arrives(d, id, key, usage, cfg)
  local field = 'k:' .. key
  local old = redis.call('HGET', d.lv, field)
  if old and old ~= id then
    local s = redis.call('HGET', d.state, old)
    local where = s and select(3, parse_state(s))
    if where and in_flight_where(where) then
      redis.call('HSET', d.lv, 'i:' .. old, 'x' .. key)
    elseif where and string.sub(where, 1, 1) ~= 'd' then
      unlink(d, old, where)
      forget(d, {old}, usage, 0, false)
      count('superseded', 1, cfg)
    end
  end
  if redis.call('HEXISTS', d.lv, 'i:' .. id) == 0 then
    redis.call('HINCRBY', usage, 'bytes', LAST_VALUE_BYTES + 2 * #key)
  end
  redis.call('HSET', d.lv, field, id, 'i:' .. id, '=' .. key)
end

-- Drops an in-flight message that a newer one of its key superseded, instead
-- of letting it come back.
local function drop_superseded(d, id, usage)
  redis.call('ZREM', d.inflight, id)
  forget(d, {id}, usage, 0, false)
  count('superseded', 1)
end
