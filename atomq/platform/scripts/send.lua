-- Stores a batch of messages and their documents in one or more queues, all
-- or nothing: a send names one queue, a publish every queue its topic matched.
-- KEYS[1..4]   doc, docp, docr, and the first queue's cfg
-- KEYS[5]      seq (the tenant's message counter)
-- KEYS[6]      the tenant's topic patterns (hash; field #v its version)
-- KEYS[7]      the request's record (hash: field #b the body's digest, #n the repeats answered,
--              and per stored script call its field, ARGV[7], holding its answer)
-- KEYS[8..]    per queue: cfg, subs (subscriber set; checked through cfg.subv),
--              then DEST_KEYS keys per destination of it; after the queues the
--              de-duplication markers, then the tenant's due index, its index of
--              oldest messages, its marker ledger and (last) its usage hash
-- ARGV[1]      the topic patterns' version the caller matched with ('' for a send)
-- ARGV[2]      number of queues
-- ARGV[3]      de-duplication window in ms
-- ARGV[4]      number of messages
-- ARGV[5]      the tenant's disk quota in bytes (0: none)
-- ARGV[6]      the generation de-duplication markers belong to ('' for the
--              queue's own: a marker of a removed queue's life does not answer)
-- ARGV[7]      this call's field in the request's record (the positions of its messages in
--              the request)
-- ARGV[8]      the digest of the request's body ('' when the node made the request's token:
--              no other request can carry it, and its record is not counted in the usage)
-- ARGV[9]      how long the record is kept, in ms
-- ARGV[10..]   per queue: the route the caller read ("<model>|<generation>|<subscriber
--              version>", no subscriber version for point-to-point, then "|sync" for a
--              queue whose sends wait for the disk), its number of
--              destinations, and each destination's name in the indexes of due and
--              oldest messages; then per message: the dedupe key index (0 = none),
--              alone for a message of the defaults, else "<index>,<priority>,<expiry
--              ms since the epoch, 0 = none>,<time to live ms, 0 = none>"; envelope
--              JSON, document count, then per document: data, properties JSON ("" = none)
-- A new marker's bytes count in the usage hash's `markers` until the marker
-- expires: the ledger (hash <expiry ms> -> bytes) says when the maintenance
-- takes them off again (due.lua).
-- A message expires at the earliest of its expiry, its time to live and the
-- queue's message_ttl_ms after the send; a message of the default priority
-- goes on the ready stream, any other in rz (see the prelude). One id a
-- message, the same in every queue. In a last-value queue each stored message
-- then supersedes the waiting one of its key (last_value_arrives).
-- Returns the message ids in order (a repeated dedupe id returns the original id),
-- or the error NOQUEUE <queue>, STALETOPICS when the patterns changed since the
-- caller matched, STALESUBS <queue> when a route changed since the caller read it,
-- or QUOTA <used> <limit> when storing the batch would pass the tenant's quota.
-- Everything is read and checked before the first write: a refused batch
-- changes nothing.
-- A call whose field the request's record holds was stored before (a retry by
-- the store's client after a time-out, or the client's retry with the same
-- Idempotency-Key): it stores nothing and returns {-1, the stored answer}; a
-- record whose body digest is another's refuses with IDEMREUSED. A stored call
-- writes its answer there: "<dropped>:<copies>|<stamp>|<sequence before the
-- first new id>|" then, per message in order, its original id, or "+<n>" for a
-- run of n new ids (stamp-sequence, one after the other). <copies> is the
-- destinations each message went to (0: a publish/subscribe queue without
-- subscribers, where the messages were stored nowhere), so a repeat answers it
-- as the first did whatever the subscribers are by then.
-- Destination limits (queue settings max_messages, max_bytes: copies neither
-- acked nor dead, and their message_bytes) hold per destination. A batch that
-- would pass one is refused whole with QUEUEFULL <queue index> <setting>
-- <max> <count> <overflow> <fits> (fits 0: the batch alone is past the limit,
-- so no wait for room can help), unless the queue's overflow drops waiting
-- messages to make room (drop_oldest, drop_lowest_priority: make_room): those
-- are chosen before the first write and dropped with the batch, to the dead
-- letter queue with reason overflow when overflow_dl is set. A message over
-- max_message_bytes refuses the batch with TOOBIG <queue index> <message
-- index> <bytes> <max>. The reply is then {dropped, ids...}: the number of
-- messages dropped to make room, then the ids.

local RECORD, record_field, digest = KEYS[7], ARGV[7], ARGV[8]
local earlier = redis.call('HMGET', RECORD, '#b', record_field)
if earlier[1] and earlier[1] ~= digest then
  return redis.error_reply('IDEMREUSED the request\'s key was used for another body')
end
if earlier[2] then
  -- A write, so that a wait for the disk after this call covers the first one's writes.
  redis.call('HINCRBY', RECORD, '#n', 1)
  return {-1, earlier[2]}
end
if ARGV[1] ~= '' and (redis.call('HGET', KEYS[6], '#v') or '0') ~= ARGV[1] then
  return redis.error_reply('STALETOPICS the topic patterns changed')
end
local nqueue = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local nmsg = tonumber(ARGV[4])
local quota = tonumber(ARGV[5])
local queues = {}         -- each: cfg, gen, ttl, dests, members (names in the indexes)
local kpos, apos, copies = 8, 10, 0
local sync = false        -- a queue's sends wait for the disk: the caller waits (WAITAOF) after this
for qi = 1, nqueue do
  local cfg = KEYS[kpos]
  local c = redis.call('HMGET', cfg, 'model', 'gen', 'subv', 'message_ttl_ms', 'lv', 'lv_key', 'max_messages',
                      'max_bytes', 'max_message_bytes', 'overflow', 'overflow_dl', 'max_dead_letters', 'durability')
  if not c[1] then return redis.error_reply('NOQUEUE ' .. qi) end
  local route = c[1] .. '|' .. c[2] .. '|'
  if c[1] == 'publish_subscribe' then route = route .. (c[3] or '0') end
  if c[13] == 'sync' then
    route = route .. '|sync'
    sync = true
  end
  if route ~= ARGV[apos] then
    return redis.error_reply('STALESUBS ' .. qi)
  end
  local ndest = tonumber(ARGV[apos + 1])
  local qd = {cfg = cfg, gen = c[2], ttl = tonumber(c[4] or '0'), dests = {}, members = {},
              max_n = tonumber(c[7] or '0'), max_b = tonumber(c[8] or '0'), max_mb = tonumber(c[9] or '0'),
              overflow = c[10] or 'reject_new', to_dl = c[11] == '1', max_dead_letters = tonumber(c[12] or '0'),
              add_n = 0, add_b = 0}
  if c[5] == '1' then qd.last_value_key = c[6] or '' end
  for i = 1, ndest do
    qd.dests[i] = dest_at(kpos + 2 + (i - 1) * DEST_KEYS)
    qd.members[i] = ARGV[apos + 1 + i]
  end
  copies = copies + ndest
  queues[qi] = qd
  kpos = kpos + 2 + ndest * DEST_KEYS
  apos = apos + 2 + ndest
end
local dd_base = kpos - 1
local marker_gen = ARGV[6]
if marker_gen == '' then marker_gen = queues[1].gen end

local USAGE = KEYS[#KEYS]
local LEDGER = KEYS[#KEYS - 1]
local OLDEST = KEYS[#KEYS - 2]
local DUE = KEYS[#KEYS - 3]
local now = now_ms()

-- The expiry of a message in a queue: the earliest of its own and the queue's.
local function expiry_in(qd, x)
  if qd.ttl > 0 and (not x or now + qd.ttl < x) then return now + qd.ttl end
  return x
end

local OVERFLOW_REASON = 'overflow'

-- Counts bytes that leave by themselves at until_ms (a de-duplication marker, the
-- request's record) in the usage hash's markers, and in the ledger's bucket the
-- maintenance takes them off at (due.lua): buckets of a 32nd of their window (at
-- least 1 s), so the ledger holds ~33 fields a window.
local function ledger_add(ledger, usage, until_ms, window_ms, bytes)
  local width = math.max(1000, math.floor(window_ms / 32))
  redis.call('HINCRBY', ledger, (math.floor(until_ms / width) + 1) * width, bytes)
  redis.call('HINCRBY', usage, 'markers', bytes)
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

-- Pass 1, reads only: which messages are new, and what they would store.
local first = {}          -- dedupe key -> index of the batch's first message with it
local original = {}       -- message index -> the id a repeated dedupe id answers with
local repeat_of = {}      -- message index -> earlier message of this batch it repeats
local starts = {}         -- message index -> ARGV position of its envelope
local priorities = {}     -- message index -> priority
local expiries = {}       -- message index -> its own expiry (ms) or nil
local dds = {}            -- message index -> dedupe key index
local heads = {}          -- queue index -> message index -> envelope head there
for qi = 1, nqueue do heads[qi] = {} end
local new_count, new_bytes, top_new = 0, 0, -1
local pos = apos
for m = 1, nmsg do
  local dd = tonumber(ARGV[pos])
  local priority, x = DEFAULT_PRIORITY, nil
  if not dd then
    local d, p, given, ttl = string.match(ARGV[pos], '^(%d+),(%d+),(%d+),(%d+)$')
    dd, priority, x, ttl = tonumber(d), tonumber(p), tonumber(given), tonumber(ttl)
    if x == 0 then x = nil end
    if ttl > 0 and (not x or now + ttl < x) then x = now + ttl end
  end
  priorities[m], expiries[m], dds[m] = priority, x, dd
  local ndocs = tonumber(ARGV[pos + 2])
  starts[m] = pos
  if dd > 0 then
    local key = KEYS[dd_base + dd]
    if first[key] then
      repeat_of[m] = first[key]
    else
      first[key] = m
      local old = redis.call('GET', key)
      if old then
        local bar = string.find(old, '|', 1, true)
        if string.sub(old, 1, bar - 1) == marker_gen then original[m] = string.sub(old, bar + 1) end
      end
    end
  end
  if not original[m] and not repeat_of[m] then
    new_count = new_count + 1
    if copies > 0 then
      local content = 0     -- the documents' data and properties
      for k = 0, ndocs - 1 do
        local data, props = #ARGV[pos + 3 + 2 * k], #ARGV[pos + 4 + 2 * k]
        new_bytes = new_bytes + DOC_BYTES + data
        if props > 0 then new_bytes = new_bytes + DOC_BYTES + props end
        content = content + data + props
      end
      for qi, qd in ipairs(queues) do
        local head = make_head(ndocs, priority, expiry_in(qd, x))
        heads[qi][m] = head
        local envelope = #head + 1 + #ARGV[pos + 1]
        new_bytes = new_bytes + (COPY_BYTES + envelope) * #qd.dests
        local size = envelope + content
        if qd.max_mb > 0 and size > qd.max_mb then
          return redis.error_reply(string.format('TOOBIG %d %d %.0f %.0f', qi, m, size, qd.max_mb))
        end
        qd.add_n, qd.add_b = qd.add_n + 1, qd.add_b + size
      end
      if priority > top_new then top_new = priority end
    end
  end
  pos = pos + 3 + ndocs * 2
end
if quota > 0 and new_bytes > 0 then
  local counted = redis.call('HMGET', USAGE, 'bytes', 'markers')
  local used = tonumber(counted[1] or '0') + tonumber(counted[2] or '0')
  if used + new_bytes > quota then
    return redis.error_reply('QUOTA ' .. used .. ' ' .. quota .. ' ' .. new_bytes)
  end
end

-- Pass 1b, reads only: the room each destination has under its limits.
local drops = {}          -- {d, qd, victims} per destination that drops waiting messages
for qi, qd in ipairs(queues) do
  if (qd.max_n > 0 or qd.max_b > 0) and qd.add_n > 0 then
    for _, d in ipairs(qd.dests) do
      local n, b = held_count(d), tonumber(redis.call('GET', d.held) or '0')
      local need_n = qd.max_n > 0 and n + qd.add_n - qd.max_n or 0
      local need_b = qd.max_b > 0 and b + qd.add_b - qd.max_b or 0
      if need_n > 0 or need_b > 0 then
        local victims
        local fits = (qd.max_n == 0 or qd.add_n <= qd.max_n) and (qd.max_b == 0 or qd.add_b <= qd.max_b)
        if fits and (qd.overflow == 'drop_oldest' or qd.overflow == 'drop_lowest_priority') then
          victims = make_room(d, qd.overflow == 'drop_lowest_priority', need_n, need_b, top_new)
        end
        if not victims then
          local limit, max, held = 'max_messages', qd.max_n, n
          if need_n <= 0 then limit, max, held = 'max_bytes', qd.max_b, b end
          return redis.error_reply(string.format('QUEUEFULL %d %s %.0f %.0f %s %d', qi, limit, max, held,
                                                 qd.overflow, fits and 1 or 0))
        end
        drops[#drops + 1] = {d = d, qd = qd, victims = victims}
      end
    end
  end
end

-- Pass 2: ids, de-duplication markers and documents.
local seq = redis.call('INCRBY', KEYS[5], new_count) - new_count
local stamp = tostring(now)
local ids = {}
local marker_bytes = 0
local doc_args, docp_args, docr_args, all_args = {}, {}, {}, {}
local fresh = {}          -- the stored messages' indexes, in order
local is_new = {}         -- message index -> true for a message this call stores
local seq_before = seq
for m = 1, nmsg do
  pos = starts[m]
  local dd = dds[m]
  local ndocs = tonumber(ARGV[pos + 2])
  pos = pos + 3
  if original[m] then
    ids[m] = original[m]
  elseif repeat_of[m] then
    ids[m] = ids[repeat_of[m]]
  else
    seq = seq + 1
    local s = tostring(seq)
    local id = stamp .. '-' .. string.rep('0', 12 - #s) .. s
    ids[m] = id
    is_new[m] = true
    if dd > 0 then
      local key, value = KEYS[dd_base + dd], marker_gen .. '|' .. id
      redis.call('SET', key, value, 'PX', window)
      marker_bytes = marker_bytes + MARKER_BYTES + #key + #value
    end
    if copies > 0 then
      for k = 1, ndocs do
        local doc = id .. '.' .. k
        doc_args[#doc_args + 1] = doc
        doc_args[#doc_args + 1] = ARGV[pos]
        if ARGV[pos + 1] ~= '' then
          docp_args[#docp_args + 1] = doc
          docp_args[#docp_args + 1] = ARGV[pos + 1]
        end
        if copies > 1 then
          docr_args[#docr_args + 1] = doc
          docr_args[#docr_args + 1] = copies
        end
        pos = pos + 2
      end
      fresh[#fresh + 1] = m
      all_args[#all_args + 1] = 0
      all_args[#all_args + 1] = id
    end
  end
end

-- Pass 3: a copy of each new message in every destination.
if #fresh > 0 then
  call_batched('HSET', DOC, doc_args)
  if #docp_args > 0 then call_batched('HSET', DOCP, docp_args) end
  if #docr_args > 0 then call_batched('HSET', DOCR, docr_args) end
  for qi, qd in ipairs(queues) do
    local msg_args, expiry_args, first_expiry = {}, {}, nil
    for _, m in ipairs(fresh) do
      local x = expiry_in(qd, expiries[m])
      msg_args[#msg_args + 1] = ids[m]
      msg_args[#msg_args + 1] = heads[qi][m] .. '|' .. ARGV[starts[m] + 1]
      if x then
        expiry_args[#expiry_args + 1] = x
        expiry_args[#expiry_args + 1] = ids[m]
        if not first_expiry or x < first_expiry then first_expiry = x end
      end
    end
    for i, d in ipairs(qd.dests) do
      redis.call('INCRBY', d.held, qd.add_b)
      redis.call('ZADD', OLDEST, 'NX', now, qd.members[i])
      call_batched('HSET', d.msg, msg_args)
      call_batched('ZADD', d.all, all_args)
      local state_args, ranked_args = {}, {}
      for _, m in ipairs(fresh) do
        local id = ids[m]
        local where = 'z'
        if priorities[m] == DEFAULT_PRIORITY then
          where = 'r' .. redis.call('XADD', d.ready, '*', 'm', id)
        else
          ranked_args[#ranked_args + 1] = ready_score(priorities[m], id)
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
      if first_expiry then
        call_batched('ZADD', d.exp, expiry_args)
        due_by(DUE, qd.members[i], first_expiry)
      end
      if qd.last_value_key then
        for _, m in ipairs(fresh) do
          last_value_arrives(d, ids[m], last_value_key(qd.last_value_key, ARGV[starts[m] + 1]), USAGE, qd.cfg)
        end
      end
    end
  end
  redis.call('HINCRBY', USAGE, 'bytes', new_bytes)
  redis.call('HINCRBY', USAGE, 'messages', #fresh * copies)
end
if marker_bytes > 0 then ledger_add(LEDGER, USAGE, now + window, window, marker_bytes) end
local dropped = 0
for _, plan in ipairs(drops) do
  local d, qd, gone, n = plan.d, plan.qd, {}, 0
  for _, v in ipairs(plan.victims) do
    -- A last-value message the batch itself superseded is gone already.
    if redis.call('HEXISTS', d.state, v.id) == 1 then
      unlink(d, v.id, v.where)
      n = n + 1
      if qd.to_dl then
        dead_letter(d, qd, v.id, v.dc, v.fails, OVERFLOW_REASON, USAGE, qd.cfg)
      else
        gone[#gone + 1] = v.id
      end
    end
  end
  forget(d, gone, USAGE, 0, false)
  count('dropped', n, qd.cfg)
  dropped = dropped + n
end
for _, qd in ipairs(queues) do
  count('sent', new_count, qd.cfg)
  count_rate('s', new_count, now, qd.cfg)
end
-- A send whose messages were all stored before (repeated dedupe ids) writes nothing else, and a
-- wait for the disk after a call that wrote nothing returns at once: this write makes the caller's
-- wait cover everything stored before it, the originals included.
if sync then redis.call('HINCRBY', queues[1].cfg, 'n:sync_sends', 1) end
local answer, run = {dropped .. ':' .. copies .. '|' .. stamp .. '|' .. seq_before .. '|'}, 0
for m = 1, nmsg do
  if is_new[m] then
    run = run + 1
  else
    if run > 0 then answer[#answer + 1] = '+' .. run .. ',' end
    run = 0
    answer[#answer + 1] = ids[m] .. ','
  end
end
if run > 0 then answer[#answer + 1] = '+' .. run end
local stored = table.concat(answer)
local record_ms = tonumber(ARGV[9])
local fields = {record_field, stored}
if digest ~= '' then
  fields[3], fields[4] = '#b', digest
end
redis.call('HSET', RECORD, unpack(fields))
redis.call('PEXPIRE', RECORD, record_ms)
if digest ~= '' then
  -- A sender's key counts against its quota as a de-duplication marker does, until it expires;
  -- the node's own token, kept minutes, is the node's cost.
  ledger_add(LEDGER, USAGE, now + record_ms, record_ms, MARKER_BYTES + #RECORD + #record_field + #stored + #digest)
end
table.insert(ids, 1, dropped)
return ids
