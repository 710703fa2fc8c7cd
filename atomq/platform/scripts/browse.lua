-- Lists messages without consuming them, in id (send) order: one part of a page (Management
-- reads a page of many messages as several calls, each from where the one before ended).
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5..]    the destination (DEST_KEYS keys)
-- ARGV[1]      view: queued (ready, in flight, scheduled) | dead | ids (the messages
--              ARGV[8..] that are not dead, in that order, missing ones left out)
--              | dead-reason (the dead letters given the reason ARGV[8])
--              | state (the queued messages in state ARGV[8]: r ready, waiting behind their group's
--              head included, f in flight, s scheduled)
-- ARGV[2]      limit
-- ARGV[3]      cursor: the last id of the previous page, or ""
-- ARGV[4]      most document bytes in the page (a first message bigger than that comes
--              alone; the page ends early, with a cursor, at the first that does not fit)
-- ARGV[5]      the largest document a send accepts (bounds what one read may fetch)
-- ARGV[6]      most documents in the page (a first message with more comes alone)
-- ARGV[7]      most document bytes a first message may bring (-1: any; a later part of a page,
--              whose whole reply must stay within its bound)
-- Returns {next cursor or "", n, cut, bytes, then per message: id, state, envelope, then
--          per document: data, properties; then for dead letters: reason, dead-lettered ms,
--          for a message in flight: its ack deadline ms, and for a scheduled one: its due ms}.
-- cut: 1 when the page ended at its bytes or documents (ARGV[4], ARGV[6]) before its limit;
-- bytes: the document bytes of the reply.
-- The views but ids scan the destination's messages in id order, at most about ten
-- pages' worth a call: a page ends early, with a cursor, where the scan stops. The in
-- flight and scheduled states are read from their own sets instead while those hold no
-- more than that, so their pages are exact however many other messages wait.

local q = require_queue()
if q.err then return q end
local d = dest_at(5)
local dead_view = ARGV[1] == 'dead' or ARGV[1] == 'dead-reason'
local only_reason = ARGV[1] == 'dead-reason' and ARGV[8] or nil
local limit = tonumber(ARGV[2])
local start = '-'
if ARGV[3] ~= '' then start = '(' .. ARGV[3] end

local picked, wheres = {}, {}
local budget = limit * 10 + 100
local now = now_ms()
-- A scheduled message that is due (a redelivery or a delayed copy no sweep moved yet) is
-- ready: the next get takes it, so a browse shows it ready, not waiting.
local function as_seen(id, s)
  local dc, fails, where = parse_state(s)
  if string.byte(where) ~= 115 then return s end  -- 's'
  local due = redis.call('ZSCORE', d.sched, id)
  if due and tonumber(due) <= now then return fmt_state(dc, fails, 'r') end
  return s
end
local scanned, last = 0, nil
local more = false
if ARGV[1] == 'ids' and #ARGV > 7 then
  local ids = {}
  for i = 8, math.min(#ARGV, 7 + limit) do ids[#ids + 1] = ARGV[i] end
  local states = hmget_batched(d.state, ids)
  for i, id in ipairs(ids) do
    local s = states[i]
    if s and string.find(s, '|d', 1, true) == nil then
      picked[#picked + 1] = id
      wheres[#wheres + 1] = as_seen(id, s)
    end
  end
  scanned = budget  -- no scan
end
local only_tag = ARGV[1] == 'state' and ARGV[8] or nil
local by_set = ({f = d.inflight, s = d.sched})[only_tag or '']
local by_set_read = false
if by_set and redis.call('ZCARD', by_set) <= budget then
  -- The state's members after the cursor, in the id order of d.all: ids are "<ms>-<seq>"
  -- of fixed widths, so comparing the two numbers is comparing the ids.
  local function id_key(id)
    local ms, seq = string.match(id, '^(%d+)-(%d+)$')
    return {tonumber(ms) or -1, tonumber(seq) or -1}
  end
  local function before(x, y) return x[1] < y[1] or (x[1] == y[1] and x[2] < y[2]) end
  local after = ARGV[3] ~= '' and id_key(ARGV[3]) or nil
  local members, keys = {}, {}
  local members_of = only_tag == 's' and redis.call('ZRANGE', by_set, '(' .. now, '+inf', 'BYSCORE')
    or redis.call('ZRANGE', by_set, 0, -1)
  for _, id in ipairs(members_of) do
    local key = id_key(id)
    if not after or before(after, key) then
      members[#members + 1] = id
      keys[id] = key
    end
  end
  table.sort(members, function(x, y) return before(keys[x], keys[y]) end)
  local page = {}
  for i = 1, math.min(limit, #members) do page[i] = members[i] end
  local states = #page > 0 and redis.call('HMGET', d.state, unpack(page)) or {}
  for i, id in ipairs(page) do
    if states[i] then  -- always, while the set and the states agree
      picked[#picked + 1] = id
      wheres[#wheres + 1] = states[i]
    end
  end
  if #members > limit then more, last = true, members[limit] end
  scanned = budget  -- no scan
  by_set_read = true
end
local function wanted(s)
  local is_dead = string.find(s, '|d', 1, true) ~= nil
  if only_tag then
    local tag = string.sub(select(3, parse_state(s)), 1, 1)
    return tag == only_tag or (only_tag == 'r' and (tag == 'z' or tag == 'w'))
  end
  return is_dead == dead_view and (not only_reason
    or dead_reason(d, string.sub(s, string.find(s, '|d', 1, true) + 1)) == only_reason)
end
-- Bounded scan: skips messages of the other views, never reads more than ~10 pages.
while ARGV[1] ~= 'ids' and #picked < limit and scanned < budget do
  local ids = redis.call('ZRANGE', d.all, start, '+', 'BYLEX', 'LIMIT', 0, limit)
  if #ids == 0 then break end
  local states = redis.call('HMGET', d.state, unpack(ids))
  for i, id in ipairs(ids) do
    scanned = scanned + 1
    last = id
    local s = states[i] and as_seen(id, states[i])
    if s then
      if wanted(s) then
        picked[#picked + 1] = id
        wheres[#wheres + 1] = s
        if #picked == limit then break end
      end
    end
  end
  start = '(' .. last
  if #ids < limit then break end
end
if ARGV[1] ~= 'ids' and not by_set_read and last then
  if #picked < limit then
    -- The scan stopped at its bound or at the end: more while any message follows.
    more = #redis.call('ZRANGE', d.all, '(' .. last, '+', 'BYLEX', 'LIMIT', 0, 1) > 0
  else
    -- A full page: more only while another message of the view follows (or the rest of the
    -- scan's bound does not reach far enough to tell), so the last page is not an empty one.
    local from = '(' .. last
    while scanned < budget do
      local ids = redis.call('ZRANGE', d.all, from, '+', 'BYLEX', 'LIMIT', 0, limit)
      if #ids == 0 then break end
      local states = redis.call('HMGET', d.state, unpack(ids))
      for i = 1, #ids do
        scanned = scanned + 1
        if states[i] and wanted(as_seen(ids[i], states[i])) then more = true break end
      end
      if more or #ids < limit then break end
      from = '(' .. ids[#ids]
    end
    if scanned >= budget then more = true end
  end
end

local out = {more and last or '', #picked, 0, 0}
if #picked == 0 then return out end
local envs = redis.call('HMGET', d.msg, unpack(picked))
local live, ndocs = {}, {}
for i = 1, #picked do
  live[i] = i
  ndocs[i] = doc_count(envs[i])
end
local alone = tonumber(ARGV[7])
local kept, data, props, used = take_within(within_docs(live, ndocs, tonumber(ARGV[6])), picked, ndocs,
                                            tonumber(ARGV[4]), tonumber(ARGV[5]), alone >= 0 and alone or nil)
out[4] = used
if kept < #picked then
  out[1] = kept > 0 and picked[kept] or ARGV[3]
  out[2] = kept
  out[3] = kept > 0 and 1 or 0
end
local j = 0
for i = 1, kept do
  local id = picked[i]
  out[#out + 1] = id
  out[#out + 1] = wheres[i]
  out[#out + 1] = envs[i]
  for _ = 1, ndocs[i] do
    j = j + 1
    out[#out + 1] = data[j] or ''
    out[#out + 1] = props[j] or ''
  end
  if dead_view then
    local where = string.sub(wheres[i], string.find(wheres[i], '|d', 1, true) + 1)
    out[#out + 1] = dead_reason(d, where)
    out[#out + 1] = tonumber(string.sub(where, 2, string.find(where, '-', 1, true) - 1))
  elseif in_flight_state(wheres[i]) then
    out[#out + 1] = redis.call('ZSCORE', d.inflight, id) or ''
  elseif string.find(wheres[i], '|s', 1, true) then
    out[#out + 1] = redis.call('ZSCORE', d.sched, id) or ''
  end
end
return out
