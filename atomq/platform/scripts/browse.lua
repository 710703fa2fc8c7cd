-- Lists messages without consuming them, in id (send) order.
-- KEYS[1..4]   doc, docp, docr, cfg
-- KEYS[5..]    the destination (DEST_KEYS keys)
-- ARGV[1]      view: queued (ready, in flight, scheduled) | dead | ids (the messages
--              ARGV[6..] that are not dead, in that order, missing ones left out)
--              | dead-reason (the dead letters given the reason ARGV[6])
-- ARGV[2]      limit
-- ARGV[3]      cursor: the last id of the previous page, or ""
-- ARGV[4]      most document bytes in the page (a first message bigger than that comes
--              alone; the page ends early, with a cursor, at the first that does not fit)
-- ARGV[5]      the largest document a send accepts (bounds what one read may fetch)
-- Returns {next cursor or "", n, then per message: id, state, envelope, then
--          per document: data, properties; then for dead letters: reason, dead-lettered ms}.

local q = require_queue()
if q.err then return q end
local d = dest_at(5)
local dead_view = ARGV[1] == 'dead' or ARGV[1] == 'dead-reason'
local only_reason = ARGV[1] == 'dead-reason' and ARGV[6] or nil
local limit = tonumber(ARGV[2])
local start = '-'
if ARGV[3] ~= '' then start = '(' .. ARGV[3] end

local picked, wheres = {}, {}
local scanned, last = 0, nil
local more = false
if ARGV[1] == 'ids' and #ARGV > 5 then
  local ids = {}
  for i = 6, math.min(#ARGV, 5 + limit) do ids[#ids + 1] = ARGV[i] end
  local states = hmget_batched(d.state, ids)
  for i, id in ipairs(ids) do
    local s = states[i]
    if s and string.find(s, '|d', 1, true) == nil then
      picked[#picked + 1] = id
      wheres[#wheres + 1] = s
    end
  end
  scanned = limit * 10 + 100  -- no scan
end
-- Bounded scan: skips messages of the other view, never reads more than ~10 pages. It looks one
-- match past the page, so a page that holds the last match says nothing follows.
local budget, batch, ended = limit * 10 + 100, limit + 1, false
while ARGV[1] ~= 'ids' and not more and scanned < budget do
  local ids = redis.call('ZRANGE', d.all, start, '+', 'BYLEX', 'LIMIT', 0, batch)
  local states = #ids > 0 and redis.call('HMGET', d.state, unpack(ids)) or {}
  for i, id in ipairs(ids) do
    local s = states[i]
    if s then
      local is_dead = string.find(s, '|d', 1, true) ~= nil
      if is_dead == dead_view and (not only_reason
          or dead_reason(d, string.sub(s, string.find(s, '|d', 1, true) + 1)) == only_reason) then
        if #picked == limit then
          more = true
          break
        end
        picked[#picked + 1] = id
        wheres[#wheres + 1] = s
      end
    end
    scanned = scanned + 1
    last = id
  end
  if #ids < batch then
    ended = true
    break
  end
  start = '(' .. last
end
if ARGV[1] ~= 'ids' and not more and not ended and last then
  -- The budget ran out first: more follows when anything does (the next page skips what does not match).
  more = #redis.call('ZRANGE', d.all, '(' .. last, '+', 'BYLEX', 'LIMIT', 0, 1) > 0
end

local out = {more and last or '', #picked}
if #picked == 0 then return out end
local envs = redis.call('HMGET', d.msg, unpack(picked))
local live, ndocs = {}, {}
for i = 1, #picked do
  live[i] = i
  ndocs[i] = doc_count(envs[i])
end
local kept, data, props = take_within(live, picked, ndocs, tonumber(ARGV[4]), tonumber(ARGV[5]))
if kept < #picked then
  out[1] = picked[kept]
  out[2] = kept
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
  end
end
return out
