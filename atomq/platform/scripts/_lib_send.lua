-- Shared prelude, part 7 of 7 (atomq.platform.scripts.LIB_PARTS): Storing sends: the room a destination has, the copies of a batch, a request's record, the copies a chunked send still owes.
-- A send whose copies pass the chunk bound (atomq.platform.queues.send_journal) is
-- stored in steps: send.lua prepares it (checks, ids, documents, the usage) and
-- writes its journal; send_apply.lua makes the copies of a few destinations a
-- call. Until a destination's copies are made, the tenant's pending hash holds,
-- per destination and queue generation ("<member>|<gen>"), the copies and
-- ("<member>|<gen>|b") the bytes the journal reserved there, which the
-- destination's limits count as held.

-- Counts bytes that leave by themselves at until_ms (a de-duplication marker, the
-- request's record) in the usage hash's markers, and in the ledger's bucket the
-- maintenance takes them off at (due.lua): buckets of a 32nd of their window (at
-- least 1 s), so the ledger holds ~33 fields a window.
local function ledger_add(ledger, usage, until_ms, window_ms, bytes)
  local width = math.max(1000, math.floor(window_ms / 32))
  redis.call('HINCRBY', ledger, (math.floor(until_ms / width) + 1) * width, bytes)
  redis.call('HINCRBY', usage, 'markers', bytes)
end

-- Writes a stored call's answer in its request's record (see send.lua), kept record_ms.
local function write_record(record, field, stored, digest, record_ms, ledger, usage, now)
  local fields = {field, stored}
  if digest ~= '' then
    fields[3], fields[4] = '#b', digest
  end
  redis.call('HSET', record, unpack(fields))
  redis.call('PEXPIRE', record, record_ms)
  if digest ~= '' then
    -- A sender's key counts against its quota as a de-duplication marker does, until it expires;
    -- the node's own token, kept minutes, is the node's cost.
    ledger_add(ledger, usage, now + record_ms, record_ms, MARKER_BYTES + #record + #field + #stored + #digest)
  end
end

-- A queue's route as its senders read it (routes.py) from its cfg's model, gen, subv, access,
-- ordering and durability: "<model>|<generation>|<subscriber version>", no subscriber version
-- for point-to-point, then "|ordered" for an exclusive or group-ordered queue, then "|sync" for
-- a queue whose sends wait for the disk. A send whose route changed since its caller read it
-- (STALESUBS) is planned again.
local function route_of(model, gen, subv, access, ordering, durability)
  local route = model .. '|' .. gen .. '|'
  if model == 'publish_subscribe' then route = route .. (subv or '0') end
  if access == 'exclusive' or ordering == 'group' then route = route .. '|ordered' end
  if durability == 'sync' then route = route .. '|sync' end
  return route
end

-- The id a de-duplication marker (key `key`, "<generation>|<id>", written by send.lua) answers
-- with: a message sent before with that dedupe id, in generation `gen`; nil for none (no marker,
-- or one of a removed queue's life).
local function marker_original(key, gen)
  local old = redis.call('GET', key)
  if not old then return nil end
  local bar = string.find(old, '|', 1, true)
  if string.sub(old, 1, bar - 1) == gen then return string.sub(old, bar + 1) end
  return nil
end

-- Adds dn copies and db bytes to what a destination is owed (negative: they were made or released).
local function pend(pending, member, gen, dn, db)
  local field = member .. '|' .. gen
  if redis.call('HINCRBY', pending, field, dn) == 0 then redis.call('HDEL', pending, field) end
  if redis.call('HINCRBY', pending, field .. '|b', db) == 0 then redis.call('HDEL', pending, field .. '|b') end
end

-- The journals that owe exclusive or group-ordered destination `member` copies (send_keys.send_owed:
-- "<member>|<journal>", names holding no '|', so '}' bounds the member's entries), but `own`.
local function owed_by(owed, member, own)
  local names = {}
  for _, entry in ipairs(redis.call('ZRANGEBYLEX', owed, '[' .. member .. '|', '(' .. member .. '}')) do
    local name = string.sub(entry, #member + 2)
    if name ~= own then names[#names + 1] = name end
  end
  return names
end

-- Whether the journal of owed entry `name` was prepared: a journal's name, or a reservation's
-- ("<journal>.<plan>", send_keys.reservation_of_plan) its prepare made the journal, so no longer
-- listed as reserving ("r.<name>", send_keys.reservation_name) in the tenant's index `journals`.
local function owed_prepared(journals, name)
  local journal = string.match(name, '^([^.]*)%.')
  local reserving = journal and redis.call('ZSCORE', journals, 'r.' .. name)
  return not reserving and redis.call('ZSCORE', journals, journal or name) ~= false
end

-- The oldest waiting (ready or scheduled) messages of destination d in send
-- order, of priority p only when p is given (`sched`: the scheduled ones by
-- priority, read once): at least the k oldest, when that many wait, and
-- whether more wait than those returned. The ready ones come from the stream
-- and rz, k from each: past the last one read of a source that had more,
-- another of it may be older, so the list ends there.
local function waiting(d, p, k, sched)
  local ids, horizon = {}, nil
  local function add(list)
    for _, id in ipairs(list) do ids[#ids + 1] = id end
    if #list == k then
      local last = send_order(list[#list])
      if not horizon or last < horizon then horizon = last end
    end
  end
  if not p or p == DEFAULT_PRIORITY then
    local stream = {}
    for _, e in ipairs(redis.call('XRANGE', d.ready, '-', '+', 'COUNT', k)) do stream[#stream + 1] = e[2][2] end
    add(stream)
  end
  if p then
    local band = tostring(9 - p)
    add(redis.call('ZRANGEBYSCORE', d.rz, band .. string.rep('0', 13), band .. string.rep('9', 13), 'LIMIT', 0, k))
  else
    local ranked, scored = {}, in_send_order(d, k)
    for i = 1, #scored, 2 do ranked[#ranked + 1] = scored[i] end
    add(ranked)
  end
  for q = p or 0, p or 9 do
    for _, id in ipairs(sched[q] or {}) do ids[#ids + 1] = id end
  end
  local seq, kept = {}, {}
  for _, id in ipairs(ids) do
    seq[id] = send_order(id)
    if not horizon or seq[id] <= horizon then kept[#kept + 1] = id end
  end
  table.sort(kept, function(a, b) return seq[a] < seq[b] end)
  return kept, horizon ~= nil
end

-- The waiting messages an overflowing send drops from destination d to make
-- room for need_n more copies and need_b more bytes: the oldest, or with
-- `lowest` the lowest priority first and the oldest of each. Returns nil when
-- they cannot make that room, or (`lowest`) when making it would take a
-- waiting message of a higher priority than the send's highest, top_new.
local function make_room(d, lowest, need_n, need_b, top_new)
  local sched = {}
  for _, id in ipairs(redis.call('ZRANGE', d.sched, 0, -1)) do
    local _, p = env_head(redis.call('HGET', d.msg, id))
    sched[p] = sched[p] or {}
    sched[p][#sched[p] + 1] = id
  end
  local levels = {false}
  if lowest then levels = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9} end
  local victims, got_n, got_b = {}, 0, 0
  for _, p in ipairs(levels) do
    if lowest and p > top_new then return nil end
    local k = math.max(need_n - got_n, 16)
    local base_n, base_b, base_v = got_n, got_b, #victims
    while true do
      local ids, more = waiting(d, p or nil, k, sched)
      got_n, got_b = base_n, base_b
      for i = #victims, base_v + 1, -1 do victims[i] = nil end
      for _, id in ipairs(ids) do
        if got_n >= need_n and got_b >= need_b then return victims end
        local dc, fails, where = parse_state(redis.call('HGET', d.state, id))
        victims[#victims + 1] = {id = id, where = where, dc = dc, fails = fails}
        got_n = got_n + 1
        if need_b > 0 then got_b = got_b + message_bytes(d, id) end
      end
      if got_n >= need_n and got_b >= need_b then return victims end
      if not more then break end
      k = k * 4
    end
  end
  return nil
end

local OVERFLOW_REASON = 'overflow'

-- Drops the victims make_room chose from destination d of queue qd (cfg, to_dl,
-- max_dead_letters), to its dead letters when the queue keeps them; returns how many.
local function drop_victims(d, qd, victims, usage)
  local gone, n = {}, 0
  for _, v in ipairs(victims) do
    -- A last-value message the batch itself superseded is gone already.
    if redis.call('HEXISTS', d.state, v.id) == 1 then
      unlink(d, v.id, v.where)
      n = n + 1
      if qd.to_dl then
        dead_letter(d, qd, v.id, v.dc, v.fails, OVERFLOW_REASON, usage, qd.cfg)
      else
        gone[#gone + 1] = v.id
      end
    end
  end
  forget(d, gone, usage, 0, false)
  count('dropped', n, qd.cfg)
  return n
end

-- When each of the n messages of a batch sent at `at` is due in a queue whose
-- default delay is queue_delay (ms): after its own delay (delays[j], nil when it
-- gives none) or the queue's. Returns the due times (false for one due at
-- once), or nil when every message is.
local function due_times(delays, n, queue_delay, at)
  local out, any = {}, false
  for j = 1, n do
    local delay = delays[j] or queue_delay
    out[j] = delay > 0 and at + delay
    any = any or delay > 0
  end
  return any and out or nil
end

-- Stores a copy of each message of batch b in destination d, named `member` in the
-- tenant's indexes: b.msg (id, envelope pairs), b.all (score, id pairs), b.exp
-- (expiry, id pairs) and b.first (the earliest expiry, or nil), b.ids, b.priorities and
-- b.json (each message's envelope JSON) in order, b.due (due_times; nil: all ready at
-- once), b.bytes (what the copies add to the destination's held bytes), b.lv (a
-- last-value queue's key property, nil for another queue), b.grouped (the queue's
-- ordering is "group": a message of a group whose head is out waits behind it, see
-- _lib_groups.lua) and b.cfg (the queue's cfg); `at` is the send time. A delayed copy
-- waits in sched, as a redelivery does, never delivered (delivery count 0) until the
-- sweep makes it ready (arrive), and joins its group only then.
local function store_copies(d, member, b, at, due, oldest, usage)
  redis.call('INCRBY', d.held, b.bytes)
  -- LT: a chunked send's step copies messages of the time it was prepared, maybe older than another's since.
  redis.call('ZADD', oldest, 'LT', at, member)
  call_batched('HSET', d.msg, b.msg)
  call_batched('ZADD', d.all, b.all)
  if b.grouped and not b.groups then
    -- Read once a batch, whatever the destinations it is copied to.
    b.groups = {}
    for j, json in ipairs(b.json) do b.groups[j] = json_group(json) or false end
  end
  local state_args, ranked_args, sched_args, first_due = {}, {}, {}, nil
  for j, id in ipairs(b.ids) do
    local where = 'z'
    local due_at = b.due and b.due[j]
    local place = b.grouped and b.groups[j] and not due_at and string.match(id, '%-(%d+)$')
    if due_at then
      where = 's'
      sched_args[#sched_args + 1] = due_at
      sched_args[#sched_args + 1] = id
      if not first_due or due_at < first_due then first_due = due_at end
    elseif place and group_waits(d, b.groups[j], id, place) then
      where = 'w' .. place
    elseif b.priorities[j] == DEFAULT_PRIORITY then
      where = 'r' .. redis.call('XADD', d.ready, '*', 'm', id)
    else
      ranked_args[#ranked_args + 1] = ready_score(b.priorities[j], id)
      ranked_args[#ranked_args + 1] = id
    end
    state_args[#state_args + 1] = id
    state_args[#state_args + 1] = '0|0|' .. where
  end
  call_batched('HSET', d.state, state_args)
  if #ranked_args > 0 then
    call_batched('ZADD', d.rz, ranked_args)
    wake(d)
  end
  if first_due then
    call_batched('ZADD', d.sched, sched_args)
    count_delayed(d, #sched_args / 2)
    due_by(due, member, first_due)
    wake(d)  -- a get waiting on the queue sets its timer by the first due
  end
  if b.first then
    call_batched('ZADD', d.exp, b.exp)
    due_by(due, member, b.first)
  end
  if b.lv then
    for j, id in ipairs(b.ids) do
      last_value_arrives(d, id, last_value_key(b.lv, b.json[j]), usage, b.cfg)
    end
  end
end

-- Releases one reference to each document of the messages `ids` (with ndocs[j]
-- documents each) that a chunked send will not copy to a destination after all;
-- a document no copy refers to any more goes, as forget's do. Returns the bytes freed.
local function release_documents(ids, ndocs)
  local freed, props_kept = 0, has_props()
  for j, id in ipairs(ids) do
    for k = 1, ndocs[j] do
      local doc = id .. '.' .. k
      local r = tonumber(redis.call('HGET', DOCR, doc))
      if r and r > 2 then
        redis.call('HSET', DOCR, doc, r - 1)
      elseif r == 2 then
        redis.call('HDEL', DOCR, doc)
      else
        local data = redis.call('HSTRLEN', DOC, doc)
        local props = props_kept and redis.call('HSTRLEN', DOCP, doc) or 0
        freed = freed + DOC_BYTES + data
        if props > 0 then freed = freed + DOC_BYTES + props end
        redis.call('HDEL', DOC, doc)
        if props_kept then redis.call('HDEL', DOCP, doc) end
      end
    end
  end
  return freed
end
