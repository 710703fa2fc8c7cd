-- Shared prelude, part 6 of 7 (atomq.platform.scripts.LIB_PARTS): Sweeping a destination: due redeliveries, expired deliveries and messages, what falls due next.
-- Delayed copies whose time came (`ids`, in the order they fell due) join the
-- ready ones as if sent now: each takes the tenant's next sequence number
-- (`seq`, its message counter) for its place in rz, so it is delivered after
-- what was sent before it fell due and before what is sent after. On a queue
-- ordered by group (`grouped`) one of a group whose head is out waits behind it
-- at that place instead.
local function arrive(d, ids, seq, grouped)
  local last = redis.call('INCRBY', seq, #ids)
  local ranked, states = {}, {}
  for i, id in ipairs(ids) do
    local env = redis.call('HGET', d.msg, id)
    local _, priority = env_head(env)
    local place = string.format('%.0f', last - #ids + i)
    local group = grouped and group_of(env)
    states[#states + 1] = id
    if group and group_waits(d, group, id, place) then
      states[#states + 1] = '0|0|w' .. place
    else
      ranked[#ranked + 1] = seq_score(priority, place)
      ranked[#ranked + 1] = id
      states[#states + 1] = '0|0|z'  -- never delivered, so never failed
    end
  end
  call_batched('ZADD', d.rz, ranked)
  call_batched('HSET', d.state, states)
  count_delayed(d, -#ids)
  wake(d)
end

-- Moves due redeliveries and delayed copies to ready, fails expired deliveries
-- and expires messages whose time to live ran out, at most `limit` of each
-- (`usage`: the tenant's usage hash; `seq`: its message counter, see arrive).
-- Returns the number of messages moved, then whether it left expired deliveries
-- (`late`) or due redeliveries and delayed copies (`behind`) for a later call: what
-- it leaves of those may come before what is ready, so a get delivers nothing
-- while either is left. Expired messages it leaves hide nothing: a get checks
-- what it takes (get.lua), and the due index keeps the destination due.
local function sweep_destination(d, q, delays, now, limit, usage, seq)
  if q.exclusive then expire_consumers(d, q, now, usage) end
  local moved = expire_due(d, q, now, limit, usage)
  local expired = redis.call('ZRANGEBYSCORE', d.inflight, '-inf', now, 'LIMIT', 0, limit + 1)
  local late = #expired > limit
  if late then expired[#expired] = nil end
  for _, id in ipairs(expired) do
    local dc, fails = parse_state(redis.call('HGET', d.state, id))
    fail_delivery(d, q, delays, id, dc, fails, 'ack timeout', now, usage)
    moved = moved + 1
  end
  count('ack_timeouts', #expired)
  local due = redis.call('ZRANGEBYSCORE', d.sched, '-inf', now, 'LIMIT', 0, limit + 1)
  local behind = #due > limit
  if behind then due[#due] = nil end
  if #due > 0 then
    redis.call('ZREM', d.sched, unpack(due))
    local arrivals = {}
    for _, id in ipairs(due) do
      local dc, fails = parse_state(redis.call('HGET', d.state, id))
      if dc == 0 then
        arrivals[#arrivals + 1] = id
      else
        make_ready(d, id, dc, fails)
      end
    end
    if #arrivals > 0 then arrive(d, arrivals, seq, q.grouped) end
    moved = moved + #due
  end
  return moved, late, behind
end

-- The earliest time (ms) anything of the destination falls due: a scheduled
-- redelivery or delayed copy, an ack deadline or an expiry; nil when none is pending.
local function next_due(d)
  local first
  for _, key in ipairs({d.sched, d.inflight, d.exp}) do
    local s = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #s > 0 and (not first or tonumber(s[2]) < first) then first = tonumber(s[2]) end
  end
  return first
end

-- Takes the expiry out of a message's envelope head: a dead letter resent
-- no longer expires. The shorter envelope comes off the usage hash `usage`.
local function drop_expiry(d, id, usage)
  local e = redis.call('HGET', d.msg, id)
  local n, priority, x = env_head(e)
  if not x then return end
  local bar = string.find(e, '|', 1, true)
  local kept = make_head(n, priority, nil) .. string.sub(e, bar)
  redis.call('HSET', d.msg, id, kept)
  redis.call('HINCRBY', usage, 'bytes', #kept - #e)
end

-- Keeps the due index's promise for a destination named `member` ("" for a
-- removed one, which no index names): its score is at or before anything of
-- it falling due at `at`, so a maintenance round that visits only due
-- destinations misses nothing. Only lowers a score; the sweep sets it exactly.
local function due_by(due, member, at)
  if member ~= '' then redis.call('ZADD', due, 'LT', at, member) end
end

-- Adds a subscriber (bumping the subscriber version that sends check), up to
-- `max` per queue. Returns 1 added, 0 already there.
local function add_subscriber(subs, name, max)
  if redis.call('SISMEMBER', subs, name) == 1 then return 0 end
  if redis.call('SCARD', subs) >= max then
    return redis.error_reply('TOOMANYSUBS the queue has its most subscribers')
  end
  redis.call('SADD', subs, name)
  redis.call('HINCRBY', CFG, 'subv', 1)
  return 1
end

-- Resolves ARGV selectors from ARGV[first] on into ids and, in "receipt"
-- mode, the delivery count each receipt was issued for. Repeated selectors
-- count once; two receipts of one message stay apart (one may be stale).
local function selected(mode, first)
  local ids, wants, seen = {}, {}, {}
  for i = first, #ARGV do
    local sel = ARGV[i]
    if not seen[sel] then
      seen[sel] = true
      local id, want = sel, false
      if mode == 'receipt' then
        local dc
        id, dc = string.match(sel, '^(.+)~(%d+)$')
        want = tonumber(dc)
      end
      if id then
        ids[#ids + 1] = id
        wants[#ids] = want
      end
    end
  end
  return ids, wants
end
