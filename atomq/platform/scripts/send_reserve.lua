-- One step of the reservation of a wide send's destinations (atomq.platform.queues.send_journal):
-- a call to more destinations than one script checks within its budget checks and reserves them
-- in steps before its prepare (send.lua, ARGV[12]), which renames the reservation to its journal.
-- KEYS[1]      the reservation (send_keys.reservation_of_plan: one a body and list of
--              destinations; hash: c the destinations reserved, n all of them, dg the
--              request's body digest, x set once it is being released, d<i> per destination
--              "<queue index>|<generation>|<name in the indexes>" as the journal lists them,
--              rv "<copies>|<bytes>" reserved each destination)
-- KEYS[2]      the call's journal (once it exists the reservation is its: nothing to do)
-- KEYS[3]      the request's record
-- KEYS[4]      the tenant's index of journals (the reservation's name there, scored by when a
--              step last touched it: the maintenance releases one left untouched)
-- KEYS[5]      the tenant's pending hash (_lib_send.lua)
-- KEYS[6..]    per destination of the step: its queue's cfg, then DEST_KEYS keys
-- ARGV[1]      the destinations reserved when the caller planned the step
-- ARGV[2]      the destinations of this step (the next ones)
-- ARGV[3]      all of the call's destinations
-- ARGV[4]      the digest of the request's body
-- ARGV[5]      the reservation's name in the index
-- ARGV[6]      the call's field in the request's record
-- ARGV[7]      the generation the call's de-duplication markers belong to ('' for its queue's own:
--              send.lua's ARGV[6])
-- ARGV[8]      the call's messages given (all of them in a step planned from 0, else none)
-- ARGV[9..]    per message given: "<dedupe key index>,<priority>,<bytes at most in a destination>"
-- ARGV[..]     then per destination: its queue's index in the call, the route the caller read
--              (route_of) and its name in the indexes
-- KEYS[..]     after the destinations', the call's de-duplication markers (with its messages)
-- KEYS[#KEYS]  last, the tenant's ordered destinations owed by chunked sends (send_keys.send_owed)
-- The step that makes the reservation finds which messages are repeats, as send.lua's first pass
-- does, and reserves each destination the others' copies and bytes (rv) and records their
-- highest priority (tp) and which they are (nw: their indexes, "<m>,<m>..."); the later steps
-- reserve as it did, and the prepare finds the same messages new or makes it again (RESERVELOST).
-- A destination's limits (max_messages, max_bytes) count what it holds and what chunked sends
-- owe it; one that cannot take the copies refuses the step whole with QUEUEFULL, as send.lua does
-- (a queue that drops waiting messages to make room refuses only when they cannot make it): the
-- step then reserves nothing, and the caller releases the steps before it. STALESUBS <queue
-- index> when a route changed since the caller read it.
-- An exclusive or group-ordered destination is recorded in the owed set under the reservation's
-- name (ow, which the journal keeps: the prepare, which reads no destination, leaves the entry
-- until a step copies there or the reservation is released), so that no send there overtakes the
-- call once prepared (send.lua). A
-- destination another journal or reservation owes already refuses the step with ORDERWAIT <their
-- names>: the caller releases its reservation, goes on with or waits for them, and reserves again
-- (holding nothing while it waits, no two reservations wait for each other).
-- Returns {'c', destinations reserved}; {'j'} when the call's journal or answer exists (a retry:
-- its prepare answers); {'m', reserved} when another caller stepped since this one planned (it
-- plans again from there; 0 when the reservation is gone); {'x'} when it is being released.

local RESERVATION, JOURNAL, RECORD, JOURNALS, PENDING = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local OWED, own = KEYS[#KEYS], string.sub(ARGV[5], #'r.' + 1)  -- own: send_keys.reservation_name's
if redis.call('EXISTS', JOURNAL) == 1 or redis.call('HEXISTS', RECORD, ARGV[6]) == 1 then return {'j'} end
local r = redis.call('HMGET', RESERVATION, 'c', 'dg', 'x', 'rv', 'tp', 'nw')
local planned, step, total, digest = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
if r[3] then return {'x'} end
if r[1] and r[2] ~= digest then
  return redis.error_reply('IDEMREUSED the request\'s key was used for another body')
end
local done = tonumber(r[1] or '0')
if done ~= planned or done + step > total then return {'m', done} end
local nmsg = tonumber(ARGV[8])
local top_new, n, b, news = tonumber(r[5]), 0, 0, r[6]
if r[1] then
  n, b = string.match(r[4], '^(%d+)|(%d+)$')
  n, b = tonumber(n), tonumber(b)
else
  -- The first step: the messages not repeats now (a repeated dedupe id of the queue's generation,
  -- or one the call gave before) are what each destination is reserved for.
  local gen, dd_base, seen, new = ARGV[7], 5 + step * (1 + DEST_KEYS), {}, {}
  if gen == '' then gen = redis.call('HGET', KEYS[6], 'gen') end
  top_new = -1
  for m = 1, nmsg do
    local dd, p, size = string.match(ARGV[8 + m], '^(%d+),(%d+),(%d+)$')
    local key, fresh = KEYS[dd_base + tonumber(dd)], true
    if dd ~= '0' then
      fresh = not seen[key] and not marker_original(key, gen)
      seen[key] = true
    end
    if fresh then
      n, b, top_new = n + 1, b + tonumber(size), math.max(top_new, tonumber(p))
      new[#new + 1] = m
    end
  end
  news = table.concat(new, ',')
end

-- Reads only: every destination of the step can take its copies.
local plan, cfgs, waits, waited = {}, {}, {}, {}
local kpos, apos = 6, 9 + nmsg
for i = 1, step do
  local cfg, d = KEYS[kpos], dest_at(kpos + 1)
  local qi, member = ARGV[apos], ARGV[apos + 2]
  local c = cfgs[cfg]
  if not c then
    c = redis.call('HMGET', cfg, 'model', 'gen', 'subv', 'access', 'ordering', 'durability', 'max_messages',
                   'max_bytes', 'overflow')
    cfgs[cfg] = c
  end
  if not c[1] or route_of(c[1], c[2], c[3], c[4], c[5], c[6]) ~= ARGV[apos + 1] then
    return redis.error_reply('STALESUBS ' .. qi)
  end
  local max_n, max_b, overflow = tonumber(c[7] or '0'), tonumber(c[8] or '0'), c[9] or 'reject_new'
  if (max_n > 0 or max_b > 0) and n > 0 then
    local owed_n, owed_b = pending_of(PENDING, member, c[2])
    local held_n, held_b = held_count(d) + owed_n, tonumber(redis.call('GET', d.held) or '0') + owed_b
    local need_n = max_n > 0 and held_n + n - max_n or 0
    local need_b = max_b > 0 and held_b + b - max_b or 0
    if need_n > 0 or need_b > 0 then
      local fits = (max_n == 0 or n <= max_n) and (max_b == 0 or b <= max_b)
      -- A drop_oldest or drop_lowest_priority queue makes room when the step copies to it; here
      -- only whether it can.
      if not (fits and (overflow == 'drop_oldest' or overflow == 'drop_lowest_priority')
              and make_room(d, overflow == 'drop_lowest_priority', need_n, need_b, top_new)) then
        local limit, max, held = 'max_messages', max_n, held_n
        if need_n <= 0 then limit, max, held = 'max_bytes', max_b, held_b end
        return redis.error_reply(string.format('QUEUEFULL %s %s %.0f %.0f %s %d', qi, limit, max, held, overflow,
                                               fits and 1 or 0))
      end
    end
  end
  local ordered = c[4] == 'exclusive' or c[5] == 'group'
  if ordered then
    for _, name in ipairs(owed_by(OWED, member, own)) do
      if not waited[name] then waited[name], waits[#waits + 1] = true, name end
    end
  end
  plan[i] = {qi = qi, gen = c[2], member = member, ordered = ordered}
  kpos, apos = kpos + 1 + DEST_KEYS, apos + 3
end

if #waits > 0 then return redis.error_reply('ORDERWAIT ' .. table.concat(waits, ' ')) end

local fields = {'c', done + step, 'n', total, 'dg', digest, 'rv', n .. '|' .. b, 'tp', top_new, 'nw', news, 'ow', own}
for i, p in ipairs(plan) do
  pend(PENDING, p.member, p.gen, n, b)
  if p.ordered then redis.call('ZADD', OWED, 0, p.member .. '|' .. own) end
  fields[#fields + 1], fields[#fields + 2] = 'd' .. (done + i), p.qi .. '|' .. p.gen .. '|' .. p.member
end
call_batched('HSET', RESERVATION, fields)
redis.call('ZADD', JOURNALS, now_ms(), ARGV[5])
return {'c', done + step}
