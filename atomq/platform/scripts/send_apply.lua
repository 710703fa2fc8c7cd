-- One step of a chunked send (atomq.platform.queues.send_journal): makes the
-- copies of the next destinations of its journal, which send.lua prepared.
-- KEYS[1..4]   doc, docp, docr, and the cfg of the queue of the step's first destination
-- KEYS[5]      the journal (hash: c the destinations done, n all of them, nf the new
--              messages, st their send time, mx their highest priority, an the
--              request record's answer after its dropped count, dr the messages
--              dropped so far, rf/rk/dg/rms the record's field, key, body digest and
--              lifetime, dc 1 while the documents' reference counts are owed (the
--              first step writes them), sy 1 when a queue's sends wait for the disk (the caller
--              waits after the last step, whose writes cover the others); q<i> per
--              queue "<message_ttl_ms>|<bytes a destination holds more>|<usage
--              bytes of a destination's copies>"; rv and ow (the reservation's name, which
--              names the journal in the owed set), a reserved send's (send_reserve.lua),
--              "<copies>|<bytes>" reserved each destination, which may be more than it gets
--              (messages found repeats after, heads shorter); d<i> per destination "<queue
--              index>|<generation>|<name in the indexes>"; m<j> per new message
--              "<id>|<documents>|<priority>|<own expiry ms, 0 none>|<own delay ms, "" none>|<envelope
--              JSON>", where a journal written before delays has no delay part; dm the
--              next new message whose documents a staged send still owes the tenant's
--              documents and sm each new message's place in its call, "<m>,<m>...", which names
--              its documents in the journal's documents: "<m>.<k>" data, "<m>.<k>p" properties)
-- KEYS[6]      the tenant's index of journals (name -> when last stepped, ms)
-- KEYS[7]      the tenant's pending hash (_lib_send.lua)
-- KEYS[8]      the request's record
-- KEYS[9..12]  the tenant's usage hash, due index, index of oldest messages, marker ledger
-- KEYS[13]     the journal's documents (a staged send's upload: send_keys.journal_documents)
-- KEYS[14]     the tenant's ordered destinations owed by chunked sends (send_keys.send_owed)
-- KEYS[15..]   per destination of the step: its queue's cfg, subs, then DEST_KEYS keys
-- ARGV[1]      the destinations done when the caller read the journal
-- ARGV[2]      the destinations of this step (the next ones, in the journal's order);
--              0 for a step that only moves documents or writes their reference counts
-- ARGV[3]      the journal's name in the index
-- ARGV[4..5]   the most documents and bytes of them a step moves (past them it stops after
--              the message it is at: a message's documents move together)
-- A staged send's first steps move its documents, message by message, from the journal's
-- documents to the tenant's (deleted once empty); the next writes their reference counts; then
-- each destination gets all of its copies in this one step, in the request's
-- order, as a whole send would have stored them (the prepared send time, heads
-- and bytes); a drop_oldest or drop_lowest_priority queue makes room first,
-- against what the destination holds now. A destination whose queue was
-- removed (or made again: another generation), or whose subscriber left, gets
-- none: what the journal reserved for it (pending copies and bytes, the usage,
-- a reference to each document) is released. Either way the destination leaves the owed set (a
-- send to an exclusive or group-ordered one waits no more: send.lua, ORDERWAIT). A step never
-- waits for another journal: one owes an ordered destination only after every earlier one there
-- was done. Returns {'c', destinations done}
-- after a step; {'d', the record's answer} after the last, which writes the
-- record and deletes the journal ({'c', done, 1} after a step that moved documents or wrote
-- their counts and leaves such a step owed, {'c', done, 0} after the last of those); {'m', destinations done} when another caller
-- stepped since the caller read (it plans again from there) and {'g'} when the
-- journal is gone (finished: the record answers).

local JOURNAL, JOURNALS, PENDING, RECORD = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local USAGE, DUE, OLDEST, LEDGER, JDOCS, OWED = KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local j = redis.call('HMGET', JOURNAL, 'c', 'n', 'nf', 'st', 'mx', 'an', 'dr', 'rf', 'dg', 'rms', 'dc', 'dm', 'sm',
                     'rv', 'ow')
if not j[1] then return {'g'} end
local done, total, nfresh, at, top_new = tonumber(j[1]), tonumber(j[2]), tonumber(j[3]), tonumber(j[4]), tonumber(j[5])
local step = tonumber(ARGV[2])
if done ~= tonumber(ARGV[1]) or done + step > total then return {'m', done} end

local fields = {}
for f = 1, nfresh do fields[f] = 'm' .. f end
local ids, ndocs, priorities, expiries, delays, json = {}, {}, {}, {}, {}, {}
for f, raw in ipairs(hmget_batched(JOURNAL, fields)) do
  -- An envelope's JSON starts with {: a part of digits before it is the delay.
  local id, n, p, x, delay, env = string.match(raw, '^([^|]*)|(%d+)|(%d+)|(%d+)|(%d*)|?(.*)$')
  ids[f], ndocs[f], priorities[f], delays[f], json[f] = id, tonumber(n), tonumber(p), tonumber(delay), env
  if x ~= '0' then expiries[f] = tonumber(x) end
end
local all_args = {}
for f, id in ipairs(ids) do
  all_args[#all_args + 1] = 0
  all_args[#all_args + 1] = id
end

if j[12] then
  local places = {}
  for m in string.gmatch(j[13], '%d+') do places[#places + 1] = m end
  local f, docs, bytes, most_docs, most_bytes = tonumber(j[12]), 0, 0, tonumber(ARGV[4]), tonumber(ARGV[5])
  local doc_args, docp_args, moved = {}, {}, {}
  while f <= nfresh and docs < most_docs and bytes < most_bytes do
    local names = {}
    for k = 1, ndocs[f] do
      names[2 * k - 1], names[2 * k] = places[f] .. '.' .. k, places[f] .. '.' .. k .. 'p'
      moved[#moved + 1], moved[#moved + 2] = names[2 * k - 1], names[2 * k]
    end
    local values = hmget_batched(JDOCS, names)
    for k = 1, ndocs[f] do
      local data, props = values[2 * k - 1], values[2 * k]
      doc_args[#doc_args + 1], doc_args[#doc_args + 2] = ids[f] .. '.' .. k, data
      bytes = bytes + #data
      if props then
        docp_args[#docp_args + 1], docp_args[#docp_args + 2] = ids[f] .. '.' .. k, props
        bytes = bytes + #props
      end
    end
    docs, f = docs + ndocs[f], f + 1
  end
  call_batched('HSET', DOC, doc_args)
  if #docp_args > 0 then call_batched('HSET', DOCP, docp_args) end
  if f > nfresh then
    redis.call('DEL', JDOCS)
    redis.call('HDEL', JOURNAL, 'dm', 'sm')
  else
    call_batched('HDEL', JDOCS, moved)  -- the request's documents are held once, not twice, as they move
    redis.call('HSET', JOURNAL, 'dm', f)
  end
  redis.call('ZADD', JOURNALS, 'XX', now_ms(), ARGV[3])
  return {'c', done, 1}
end
if j[11] and total == 1 then
  redis.call('HDEL', JOURNAL, 'dc')  -- one destination: a count of one is no count (a staged send's)
elseif j[11] then
  -- Every destination refers to every document, and none does yet: the count is theirs.
  local refs = {}
  for f, id in ipairs(ids) do
    for k = 1, ndocs[f] do
      refs[#refs + 1] = id .. '.' .. k
      refs[#refs + 1] = total
    end
  end
  call_batched('HSET', DOCR, refs)
  redis.call('HDEL', JOURNAL, 'dc')
end
if step == 0 then
  redis.call('ZADD', JOURNALS, 'XX', now_ms(), ARGV[3])
  return {'c', done, 0}
end

local dests = {}
for i = 1, step do dests[i] = 'd' .. (done + i) end
dests = redis.call('HMGET', JOURNAL, unpack(dests))
local batches = {}        -- queue index -> its copies' batch (store_copies)
local dropped, kpos = 0, 15
local reserved_n, reserved_b -- what a reserved send reserved each destination (rv), else its copies
if j[14] then
  local n, b = string.match(j[14], '^(%d+)|(%d+)$')
  reserved_n, reserved_b = tonumber(n), tonumber(b)
end
for i = 1, step do
  local qi, gen, member = string.match(dests[i], '^(%d+)|([^|]*)|(.*)$')
  local cfg, subs, d = KEYS[kpos], KEYS[kpos + 1], dest_at(kpos + 2)
  kpos = kpos + 2 + DEST_KEYS
  local q = batches[qi]
  if not q then
    local ttl, add_b, copy_b = string.match(redis.call('HGET', JOURNAL, 'q' .. qi), '^(%d+)|(%d+)|(%d+)$')
    q = {ttl = tonumber(ttl), bytes = tonumber(add_b), copy_b = tonumber(copy_b), res_n = reserved_n or nfresh,
         res_b = reserved_b or tonumber(add_b)}
    batches[qi] = q
  end
  local c = redis.call('HMGET', cfg, 'gen', 'lv', 'lv_key', 'max_messages', 'max_bytes', 'overflow', 'overflow_dl',
                      'max_dead_letters', 'delay_ms', 'ordering')
  local subscriber = string.match(member, '/(.*)$')
  -- What d is owed, this journal's copies counted as they are, not as reserved.
  local owed_n, owed_b = pending_of(PENDING, member, gen)
  owed_n, owed_b = owed_n - q.res_n + nfresh, owed_b - q.res_b + q.bytes
  pend(PENDING, member, gen, -q.res_n, -q.res_b)
  redis.call('ZREM', OWED, member .. '|' .. (j[15] or ARGV[3]))
  if c[1] ~= gen or (subscriber and redis.call('SISMEMBER', subs, subscriber) == 0) then
    redis.call('HINCRBY', USAGE, 'bytes', -(q.copy_b + release_documents(ids, ndocs)))
  else
    local qd = {cfg = cfg, to_dl = c[7] == '1', max_dead_letters = tonumber(c[8] or '0')}
    local max_n, max_b, overflow = tonumber(c[4] or '0'), tonumber(c[5] or '0'), c[6] or 'reject_new'
    local victims
    if (max_n > 0 or max_b > 0) and (overflow == 'drop_oldest' or overflow == 'drop_lowest_priority') then
      -- What d holds and is owed (this journal's copies included) against its limits now.
      local need_n = max_n > 0 and held_count(d) + owed_n - max_n or 0
      local need_b = max_b > 0 and tonumber(redis.call('GET', d.held) or '0') + owed_b - max_b or 0
      if need_n > 0 or need_b > 0 then
        victims = make_room(d, overflow == 'drop_lowest_priority', need_n, need_b, top_new)
      end
    end
    if not q.msg then
      q.msg, q.exp, q.ids, q.priorities, q.json, q.all = {}, {}, ids, priorities, json, all_args
      q.due = due_times(delays, nfresh, tonumber(c[9] or '0'), at)
      for f, id in ipairs(ids) do
        local x = expiries[f]
        if q.ttl > 0 and (not x or at + q.ttl < x) then x = at + q.ttl end
        q.msg[#q.msg + 1] = id
        q.msg[#q.msg + 1] = make_head(ndocs[f], priorities[f], x) .. '|' .. json[f]
        if x then
          q.exp[#q.exp + 1] = x
          q.exp[#q.exp + 1] = id
          if not q.first or x < q.first then q.first = x end
        end
      end
    end
    q.cfg, q.lv, q.grouped = cfg, nil, c[10] == 'group'
    if c[2] == '1' then q.lv = c[3] or '' end
    store_copies(d, member, q, at, DUE, OLDEST, USAGE)
    redis.call('HINCRBY', USAGE, 'messages', nfresh)
    if victims then dropped = dropped + drop_victims(d, qd, victims, USAGE) end
  end
end

done = done + step
if done < total then
  redis.call('HSET', JOURNAL, 'c', done)
  if dropped > 0 then redis.call('HINCRBY', JOURNAL, 'dr', dropped) end
  redis.call('ZADD', JOURNALS, 'XX', now_ms(), ARGV[3])
  return {'c', done}
end
local stored = (tonumber(j[7]) + dropped) .. ':' .. j[6]
write_record(RECORD, j[8], stored, j[9], tonumber(j[10]), LEDGER, USAGE, now_ms())
-- UNLINK: a journal of 100,000 destinations freed here held the store some 60 ms (bench/request_bounds.py).
redis.call('UNLINK', JOURNAL)
redis.call('ZREM', JOURNALS, ARGV[3])
return {'d', stored}
