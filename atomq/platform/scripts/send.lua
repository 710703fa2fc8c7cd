-- Stores a batch of messages and their documents in one or more queues, all
-- or nothing: a send names one queue, a publish every queue its topic matched.
-- KEYS[1..4]   doc, docp, docr, and the first queue's cfg
-- KEYS[5]      seq (the tenant's message counter)
-- KEYS[6]      the tenant's topic patterns (hash; field #v its version)
-- KEYS[7]      the request's record (hash: field #b the body's digest, #n the repeats answered,
--              and per stored script call its field, ARGV[7], holding its answer)
-- KEYS[8..]    per queue: cfg, subs (subscriber set; checked through cfg.subv),
--              then DEST_KEYS keys per destination of it; after the queues the
--              de-duplication markers, then this call's journal (used when it is
--              chunked), the tenant's index of journals, its hash of pending copies,
--              its due index, its index of oldest messages, its marker ledger and
--              its usage hash; then the request's upload of its documents (a staged
--              send's: send_keys.send_staging), the name its journal keeps them under
--              (send_keys.journal_documents), its destinations' reservation
--              (send_keys.send_reservation) and (last) the tenant's ordered destinations owed by
--              chunked sends (send_keys.send_owed); a reserved call gives no destination's keys
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
-- ARGV[10]     '' to store the batch whole; else the journal's name in the tenant's
--              index of journals: the call only prepares a chunked send (below)
-- ARGV[11]     '' when the documents come in the arguments; else how many fields the upload
--              holds: the messages' documents were uploaded in steps (send_stage.lua) and the
--              arguments give none (each message's document count, then the next message:
--              send_journal, a staged send)
-- ARGV[12]     '' when the call checks and reserves its destinations itself; else the name of the
--              reservation in the tenant's index of journals: a call to more destinations than one
--              script checks in its budget reserved them in steps before (send_reserve.lua), and
--              the arguments give no destination's name
-- ARGV[13..]   per queue: the route the caller read ("<model>|<generation>|<subscriber
--              version>", no subscriber version for point-to-point, then "|ordered" for
--              an exclusive or group-ordered queue, then "|sync" for a
--              queue whose sends wait for the disk), its number of
--              destinations, and each destination's name in the indexes of due and
--              oldest messages; then per message: the dedupe key index (0 = none),
--              alone for a message of the defaults, else "<index>,<priority>,<expiry
--              ms since the epoch, 0 = none>,<time to live ms, 0 = none>[,<delay ms>]"
--              (no delay: the queue's delay_ms); envelope JSON, document count, then
--              per document: data, properties JSON ("" = none)
-- A new marker's bytes count in the usage hash's `markers` until the marker
-- expires: the ledger (hash <expiry ms> -> bytes) says when the maintenance
-- takes them off again (due.lua).
-- A message expires at the earliest of its expiry, its time to live and the
-- queue's message_ttl_ms after the send; a message of the default priority
-- goes on the ready stream, any other in rz (see the prelude); a delayed one
-- (its own delay, or else its queue's delay_ms) waits in sched (store_copies). One id a
-- message, the same in every queue. In a last-value queue each stored message
-- then supersedes the waiting one of its key (last_value_arrives); in a queue
-- whose ordering is group, a message of a group that has one out waits behind it
-- (_lib_groups.lua).
-- Returns the message ids in order (a repeated dedupe id returns the original id),
-- or the error NOQUEUE <queue>, STALETOPICS when the patterns changed since the
-- caller matched, STALESUBS <queue> when a route changed since the caller read it,
-- or QUOTA <used> <limit> when storing the batch would pass the tenant's quota, or
-- DELAYEXCLUSIVE <queue index> when a message with a delay would go to an exclusive
-- queue (it delivers in send order; a delayed message would hold back every later one).
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
-- Destinations count the copies chunked sends still owe them as held (the
-- pending hash: _lib_send.lua). A call that finds its journal (a chunked send of
-- this call under way) stores nothing and returns {-2}: the caller goes on with
-- its steps (send_apply.lua). A call that prepares a chunked send (ARGV[10]) does
-- every check of a whole one, then stores the ids, markers, documents (their
-- reference counts are left to the first step) and the usage, reserves each destination's copies in the pending hash, and writes the
-- journal the steps make the copies from; it copies nothing, drops nothing (each
-- step makes room in its own destinations) and returns {-3, destinations, new
-- messages}. A prepared send with no new message (every one a repeat) is stored
-- whole instead, since it has no copies to make.
-- A staged send (ARGV[11]) is a prepare whose documents' sizes are read from the upload, which
-- must hold all of them (else STAGELOST: it expired; the caller uploads again): the prepare renames
-- the upload to its journal's documents, which the first steps move to the tenant's documents.
-- A refused staged send leaves the upload to expire (the caller deletes it at once).
-- A reserved send (ARGV[12]) is a prepare that checks no destination's limits and reserves nothing:
-- its reservation, complete (else RESERVELOST: released meanwhile; the caller reserves again), did
-- both, and the prepare renames it to the journal, whose destinations it lists already; it was made
-- for the messages its first step found new, which must be those the prepare finds new (else
-- RESERVELOST: a marker came or went between them). A reserved
-- call that stores nothing (a refusal, every message a repeat) leaves the reservation to its caller,
-- which releases it (send_release.lua).
-- Exclusive and group-ordered queues deliver in send order, which a chunked send's ids fix at its
-- prepare: until its steps copy to such a destination, the owed set names the journal there (a
-- reserved send's, under its reservation's name: send_reserve.lua). A call to a destination owed by another
-- prepared journal would land before its earlier messages: it stores nothing and refuses with
-- ORDERWAIT <journal names>; the caller goes on with them, then calls again. A chunked prepare
-- waits for a reservation there too, since the reserved send's prepare, later, reads no
-- destination; a whole send does not (its ids come first).

local RECORD, record_field, digest = KEYS[7], ARGV[7], ARGV[8]
local NK = #KEYS - 4     -- the keys before the upload's two, the reservation and the owed set
local STAGE, JDOCS, RESERVATION, OWED = KEYS[NK + 1], KEYS[NK + 2], KEYS[NK + 3], KEYS[NK + 4]
local JOURNAL, JOURNALS, PENDING = KEYS[NK - 6], KEYS[NK - 5], KEYS[NK - 4]
local earlier = redis.call('HMGET', RECORD, '#b', record_field)
if earlier[1] and earlier[1] ~= digest then
  return redis.error_reply('IDEMREUSED the request\'s key was used for another body')
end
if earlier[2] then
  -- A write, so that a wait for the disk after this call covers the first one's writes.
  redis.call('HINCRBY', RECORD, '#n', 1)
  return {-1, earlier[2]}
end
local journaled = redis.call('HGET', JOURNAL, 'dg')
if journaled then
  if journaled ~= digest then
    return redis.error_reply('IDEMREUSED the request\'s key was used for another body')
  end
  return {-2}
end
local staged = ARGV[10] ~= ''
local uploaded = ARGV[11] ~= ''
local reserved = ARGV[12] ~= ''
local reservation = reserved and redis.call('HMGET', RESERVATION, 'c', 'n', 'dg', 'x', 'nw')
if reserved and (not reservation[1] or reservation[1] ~= reservation[2] or reservation[3] ~= digest
                 or reservation[4]) then
  return redis.error_reply('RESERVELOST the reservation of the destinations was released')
end
if uploaded and redis.call('HLEN', STAGE) ~= tonumber(ARGV[11]) then
  return redis.error_reply('STAGELOST the upload of the documents expired')
end
if ARGV[1] ~= '' and (redis.call('HGET', KEYS[6], '#v') or '0') ~= ARGV[1] then
  return redis.error_reply('STALETOPICS the topic patterns changed')
end
local nqueue = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local nmsg = tonumber(ARGV[4])
local quota = tonumber(ARGV[5])
local queues = {}         -- each: cfg, gen, ttl, dests, members (names in the indexes)
local kpos, apos, copies = 8, 13, 0
local sync = false        -- a queue's sends wait for the disk: the caller waits (WAITAOF) after this
local waits, waited = {}, {} -- the journals that owe this call's ordered destinations copies (ORDERWAIT)
for qi = 1, nqueue do
  local cfg = KEYS[kpos]
  local c = redis.call('HMGET', cfg, 'model', 'gen', 'subv', 'message_ttl_ms', 'lv', 'lv_key', 'max_messages',
                      'max_bytes', 'max_message_bytes', 'overflow', 'overflow_dl', 'max_dead_letters', 'durability',
                      'delay_ms', 'access', 'ordering')
  if not c[1] then return redis.error_reply('NOQUEUE ' .. qi) end
  local route = route_of(c[1], c[2], c[3], c[15], c[16], c[13])
  sync = sync or c[13] == 'sync'
  if route ~= ARGV[apos] then
    return redis.error_reply('STALESUBS ' .. qi)
  end
  local ndest = tonumber(ARGV[apos + 1])
  local qd = {cfg = cfg, gen = c[2], ttl = tonumber(c[4] or '0'), dests = {}, members = {},
              max_n = tonumber(c[7] or '0'), max_b = tonumber(c[8] or '0'), max_mb = tonumber(c[9] or '0'),
              overflow = c[10] or 'reject_new', to_dl = c[11] == '1', max_dead_letters = tonumber(c[12] or '0'),
              add_n = 0, add_b = 0, copy_b = 0, delay = tonumber(c[14] or '0'), exclusive = c[15] == 'exclusive',
              grouped = c[16] == 'group'}
  if c[5] == '1' then qd.last_value_key = c[6] or '' end
  qd.ndest = ndest
  if reserved then ndest = 0 end  -- the reservation lists them: the call gives none
  for i = 1, ndest do
    qd.dests[i] = dest_at(kpos + 2 + (i - 1) * DEST_KEYS)
    qd.members[i] = ARGV[apos + 1 + i]
    if qd.exclusive or qd.grouped then
      for _, name in ipairs(owed_by(OWED, qd.members[i], ARGV[10])) do
        if not waited[name] and (staged or owed_prepared(JOURNALS, name)) then
          waited[name], waits[#waits + 1] = true, name
        end
      end
    end
  end
  copies = copies + qd.ndest
  queues[qi] = qd
  kpos = kpos + 2 + ndest * DEST_KEYS
  apos = apos + 2 + ndest
end
if #waits > 0 then return redis.error_reply('ORDERWAIT ' .. table.concat(waits, ' ')) end
if reserved and tonumber(reservation[2]) ~= copies then
  return redis.error_reply('RESERVELOST the reservation is of other destinations')
end
local dd_base = kpos - 1
local marker_gen = ARGV[6]
if marker_gen == '' then marker_gen = queues[1].gen end

local USAGE = KEYS[NK]
local LEDGER = KEYS[NK - 1]
local OLDEST = KEYS[NK - 2]
local DUE = KEYS[NK - 3]
local now = now_ms()

-- The expiry of a message in a queue: the earliest of its own and the queue's.
local function expiry_in(qd, x)
  if qd.ttl > 0 and (not x or now + qd.ttl < x) then return now + qd.ttl end
  return x
end

-- Pass 1, reads only: which messages are new, and what they would store.
local first = {}          -- dedupe key -> index of the batch's first message with it
local original = {}       -- message index -> the id a repeated dedupe id answers with
local repeat_of = {}      -- message index -> earlier message of this batch it repeats
local starts = {}         -- message index -> ARGV position of its envelope
local priorities = {}     -- message index -> priority
local delays = {}         -- message index -> its own delay (ms) or nil (its queues' own)
local delayed = false     -- a message gives a delay of its own
local expiries = {}       -- message index -> its own expiry (ms) or nil
local dds = {}            -- message index -> dedupe key index
local heads = {}          -- queue index -> message index -> envelope head there
-- Queues of one message_ttl_ms give a message the same head: each class of them makes it once a
-- message, so a publish to many queues costs a pass over its messages, not over messages x queues.
local classes, class_of = {}, {}
for qi, qd in ipairs(queues) do
  local c = class_of[qd.ttl]
  if not c then
    c = {qd = qd, queues = {}, limited = {}, heads = {}, copy_b = 0, add_b = 0}
    class_of[qd.ttl] = c
    classes[#classes + 1] = c
  end
  c.queues[#c.queues + 1] = qi
  if qd.max_mb > 0 then c.limited[#c.limited + 1] = qi end
  heads[qi] = c.heads
end
local new_count, new_bytes, top_new, added = 0, 0, -1, 0
local uploaded_sizes = {} -- a staged send's: message index -> "<content bytes>,<usage bytes>" (send_stage.lua)
if uploaded then
  local names = {}
  for m = 1, nmsg do names[m] = '#' .. m end
  uploaded_sizes = hmget_batched(STAGE, names)
end
local pos = apos
for m = 1, nmsg do
  local dd = tonumber(ARGV[pos])
  local priority, x = DEFAULT_PRIORITY, nil
  if not dd then
    local d, p, given, ttl, delay = string.match(ARGV[pos], '^(%d+),(%d+),(%d+),(%d+),?(%d*)$')
    dd, priority, x, ttl = tonumber(d), tonumber(p), tonumber(given), tonumber(ttl)
    if x == 0 then x = nil end
    delays[m] = tonumber(delay)
    delayed = delayed or (delays[m] or 0) > 0
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
      original[m] = marker_original(key, marker_gen)
    end
  end
  if not original[m] and not repeat_of[m] then
    new_count = new_count + 1
    if copies > 0 then
      local content = 0     -- the documents' data and properties
      if uploaded then
        local c, b = string.match(uploaded_sizes[m], '^(%d+),(%d+)$')
        content, new_bytes = tonumber(c), new_bytes + tonumber(b)
      end
      for k = 0, uploaded and -1 or ndocs - 1 do
        local data, props = #ARGV[pos + 3 + 2 * k], #ARGV[pos + 4 + 2 * k]
        new_bytes = new_bytes + DOC_BYTES + data
        if props > 0 then new_bytes = new_bytes + DOC_BYTES + props end
        content = content + data + props
      end
      local json = #ARGV[pos + 1]
      for _, c in ipairs(classes) do
        local head = make_head(ndocs, priority, expiry_in(c.qd, x))
        c.heads[m] = head
        local envelope = #head + 1 + json
        local size = envelope + content
        for _, qi in ipairs(c.limited) do
          local most = queues[qi].max_mb
          if size > most then
            return redis.error_reply(string.format('TOOBIG %d %d %.0f %.0f', qi, m, size, most))
          end
        end
        c.copy_b, c.add_b = c.copy_b + COPY_BYTES + envelope, c.add_b + size
      end
      added = added + 1
      if priority > top_new then top_new = priority end
    end
  end
  pos = pos + 3 + (uploaded and 0 or ndocs * 2)
end
if reserved then
  -- The reservation was made for the messages its first step found new: this call's must be those.
  local new = {}
  for m = 1, nmsg do
    if not original[m] and not repeat_of[m] then new[#new + 1] = m end
  end
  if table.concat(new, ',') ~= reservation[5] then
    return redis.error_reply('RESERVELOST the reservation was made for other messages than are new')
  end
end
for _, c in ipairs(classes) do
  for _, qi in ipairs(c.queues) do
    local qd = queues[qi]
    qd.add_n, qd.add_b, qd.copy_b = added, c.add_b, c.copy_b
    new_bytes = new_bytes + c.copy_b * qd.ndest
  end
end
if quota > 0 and new_bytes > 0 then
  local counted = redis.call('HMGET', USAGE, 'bytes', 'markers')
  local used = tonumber(counted[1] or '0') + tonumber(counted[2] or '0')
  if used + new_bytes > quota then
    return redis.error_reply('QUOTA ' .. used .. ' ' .. quota .. ' ' .. new_bytes)
  end
end

if delayed then
  for qi, qd in ipairs(queues) do
    if qd.exclusive then return redis.error_reply('DELAYEXCLUSIVE ' .. qi) end
  end
end

-- Pass 1b, reads only: the room each destination has under its limits (a reserved call's
-- reservation checked it: its queues give no destination here).
local drops = {}          -- {d, qd, victims} per destination that drops waiting messages
for qi, qd in ipairs(queues) do
  if (qd.max_n > 0 or qd.max_b > 0) and qd.add_n > 0 then
    for i, d in ipairs(qd.dests) do
      local owed_n, owed_b = pending_of(PENDING, qd.members[i], qd.gen)
      local n, b = held_count(d) + owed_n, tonumber(redis.call('GET', d.held) or '0') + owed_b
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
        -- A chunked send's step chooses them again when it copies to d, against what d holds then.
        if not staged then drops[#drops + 1] = {d = d, qd = qd, victims = victims} end
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
      for k = 1, uploaded and 0 or ndocs do
        local doc = id .. '.' .. k
        doc_args[#doc_args + 1] = doc
        doc_args[#doc_args + 1] = ARGV[pos]
        if ARGV[pos + 1] ~= '' then
          docp_args[#docp_args + 1] = doc
          docp_args[#docp_args + 1] = ARGV[pos + 1]
        end
        if copies > 1 and not staged then
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

local function answer_tail()
  local answer, run = {copies .. '|' .. stamp .. '|' .. seq_before .. '|'}, 0
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
  return table.concat(answer)
end

if marker_bytes > 0 then ledger_add(LEDGER, USAGE, now + window, window, marker_bytes) end
for _, qd in ipairs(queues) do
  count('sent', new_count, qd.cfg)
  count_rate('s', new_count, now, qd.cfg)
end

if staged and #fresh > 0 then
  -- The journal: what the steps need to make the copies without the request (send_apply.lua).
  if #doc_args > 0 then call_batched('HSET', DOC, doc_args) end
  if #docp_args > 0 then call_batched('HSET', DOCP, docp_args) end
  redis.call('HINCRBY', USAGE, 'bytes', new_bytes)
  -- The documents' reference counts (a fifth of this call's time at 10 documents a message) are
  -- the first step's: 'dc' says they are owed. No copy refers to the documents before then.
  local j = {'c', 0, 'dc', 1, 'n', copies, 'nf', #fresh, 'st', stamp, 'mx', top_new, 'an', answer_tail(), 'dr', 0,
             'rf', record_field, 'rk', RECORD, 'dg', digest, 'rms', ARGV[9], 'sy', sync and 1 or 0}
  if reserved then
    -- The reservation holds the destinations (d<i>) and what each was reserved (r<queue>), and
    -- becomes the journal: the fields below replace its cursor.
    redis.call('RENAME', RESERVATION, JOURNAL)
    redis.call('ZREM', JOURNALS, ARGV[12])
  end
  local di = 0
  for qi, qd in ipairs(queues) do
    j[#j + 1], j[#j + 2] = 'q' .. qi, qd.ttl .. '|' .. qd.add_b .. '|' .. qd.copy_b
    for i = 1, #qd.dests do
      di = di + 1
      j[#j + 1], j[#j + 2] = 'd' .. di, qi .. '|' .. qd.gen .. '|' .. qd.members[i]
      pend(PENDING, qd.members[i], qd.gen, #fresh, qd.add_b)
      if qd.exclusive or qd.grouped then redis.call('ZADD', OWED, 0, qd.members[i] .. '|' .. ARGV[10]) end
    end
  end
  for f, m in ipairs(fresh) do
    j[#j + 1] = 'm' .. f
    j[#j + 1] = ids[m] .. '|' .. ARGV[starts[m] + 2] .. '|' .. priorities[m] .. '|' .. (expiries[m] or 0) .. '|' ..
                (delays[m] or '') .. '|' .. ARGV[starts[m] + 1]
  end
  if uploaded then
    -- The upload is the journal's now: it no longer expires, and the first steps move its
    -- documents ('dm': the next new message's; 'sm': each new message's place in the call, which
    -- names its documents in the upload).
    redis.call('RENAME', STAGE, JDOCS)
    redis.call('PERSIST', JDOCS)
    local places = {}
    for f, m in ipairs(fresh) do places[f] = m end
    j[#j + 1], j[#j + 2], j[#j + 3], j[#j + 4] = 'dm', 1, 'sm', table.concat(places, ',')
  end
  call_batched('HSET', JOURNAL, j)
  redis.call('ZADD', JOURNALS, now, ARGV[10])
  return {-3, copies, #fresh}
end

-- Pass 3: a copy of each new message in every destination.
if #fresh > 0 then
  call_batched('HSET', DOC, doc_args)
  if #docp_args > 0 then call_batched('HSET', DOCP, docp_args) end
  if #docr_args > 0 then call_batched('HSET', DOCR, docr_args) end
  local fresh_ids, fresh_priorities, fresh_json, fresh_delays = {}, {}, {}, {}
  for f, m in ipairs(fresh) do
    fresh_ids[f], fresh_priorities[f], fresh_json[f], fresh_delays[f] = ids[m], priorities[m], ARGV[starts[m] + 1],
                                                                        delays[m]
  end
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
    local batch = {msg = msg_args, all = all_args, exp = expiry_args, first = first_expiry, ids = fresh_ids,
                   priorities = fresh_priorities, json = fresh_json, bytes = qd.add_b, lv = qd.last_value_key,
                   cfg = qd.cfg, due = due_times(fresh_delays, #fresh, qd.delay, now), grouped = qd.grouped}
    for i, d in ipairs(qd.dests) do
      store_copies(d, qd.members[i], batch, now, DUE, OLDEST, USAGE)
    end
  end
  redis.call('HINCRBY', USAGE, 'bytes', new_bytes)
  redis.call('HINCRBY', USAGE, 'messages', #fresh * copies)
end
local dropped = 0
for _, plan in ipairs(drops) do
  dropped = dropped + drop_victims(plan.d, plan.qd, plan.victims, USAGE)
end
-- A send whose messages were all stored before (repeated dedupe ids) writes nothing else, and a
-- wait for the disk after a call that wrote nothing returns at once: this write makes the caller's
-- wait cover everything stored before it, the originals included.
if sync then redis.call('HINCRBY', queues[1].cfg, 'n:sync_sends', 1) end
write_record(RECORD, record_field, dropped .. ':' .. answer_tail(), digest, tonumber(ARGV[9]), LEDGER, USAGE, now)
table.insert(ids, 1, dropped)
return ids
