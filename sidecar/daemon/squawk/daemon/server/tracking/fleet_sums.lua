-- The sync's sums: the second half of the script fleet.lua begins (its
-- locals in scope), run for op sync once move and keep have returned.

-- The windows' sums, their old buckets and anything not a count dropped
-- first, so the additions below always meet a count (HINCRBY fails on a
-- field that is not one) and a planted hash of countless fields costs one
-- DEL, not a scan at every sync.
--
-- A bucket's field names the window it was counted in: kind, window ms,
-- buckets, number ("w60000:10:29512345"), so that pods whose windows
-- differ (a rollout, a mistake) never drop each other's counts: a bucket
-- is dropped only once it is out of the window it was counted in, and each
-- pod sums every pod's buckets that began within its own window.
local wspan = math.floor(window) .. ':' .. math.floor(buckets) .. ':'
local bspan = math.floor(ttl) .. ':' .. BUDGET_BUCKETS .. ':'
local wb = math.floor(now * math.floor(buckets) / math.floor(window))
local bb = math.floor(now * BUDGET_BUCKETS / math.floor(ttl))
local sums = {w = 0, x = 0, d = 0, r = 0}
-- Room for two settings of the most buckets (1000) beside each other.
local MAX_COUNT_FIELDS = 2 * (2 * 1000 + 2 * BUDGET_BUCKETS) + 8
if redis.call('HLEN', KEYS[2]) > MAX_COUNT_FIELDS then
  redis.call('DEL', KEYS[2])
end
-- The longest window any live bucket was counted in: the failing pods
-- are kept as long (see below).
local longest = window
local counts = redis.call('HGETALL', KEYS[2])
for k = 1, #counts, 2 do
  local field, value = counts[k], counts[k + 1]
  local kind, counted_in, count, n = string.match(field, '^([wxdr])(%d+):(%d+):(%d+)$')
  counted_in, count, n = tonumber(counted_in), tonumber(count), tonumber(n)
  local live, mine = false, false
  if n and counted_in >= 1 and count >= 1 and count <= 1000 then
    local last = math.floor(now * count / counted_in)
    live = n > last - count and n <= last
    -- Begun within this pod's own window (its own buckets: exactly the live ones).
    local own = (kind == 'w' or kind == 'x') and window or ttl
    mine = n * counted_in / count > now - own
  end
  local v = tonumber(value)
  if live and v and v == math.floor(v) and v >= 0 and v <= MAX_SLOT then
    if mine then sums[kind] = sums[kind] + v end
    if kind == 'w' or kind == 'x' then longest = math.max(longest, counted_in) end
  else
    redis.call('HDEL', KEYS[2], field)
  end
end

local calls, failures = bounded(arg.calls, 0, MAX_ADD), bounded(arg.failures, 0, MAX_ADD)
failures = math.min(failures, calls)
local deposits, retries = bounded(arg.deposits, 0, MAX_ADD), bounded(arg.retries, 0, MAX_ADD)
local taken, refilled = bounded(arg.taken, 0, MAX_ADD), bounded(arg.refilled, 0, MAX_ADD)
local hint = bounded(arg.hint, -1, 1e12)
local want, returned = bounded(arg.want, 0, probes), bounded(arg.returned, 0, probes)
local demand = bounded(arg.demand, 0, 1e9)

-- The breaker's counts, by the fleet's state: a CLOSED window, a half-open
-- round's tally (every counted outcome is a probe's, as in the core), or
-- nothing while OPEN (they describe the upstream before the break).
if state == CLOSED and calls > 0 then
  redis.call('HINCRBY', KEYS[2], 'w' .. wspan .. wb, calls)
  sums.w = sums.w + calls
  if failures > 0 then
    redis.call('HINCRBY', KEYS[2], 'x' .. wspan .. wb, failures)
    sums.x = sums.x + failures
    redis.call('ZADD', KEYS[3], now, pod)
  end
end
local round_exists = redis.call('EXISTS', KEYS[6]) == 1
-- Each round has an id: slots leased in a round that restarted since are
-- void, and given back only to the round they were leased in.
local function round()
  if not round_exists then
    rounds = (rounds + 1) % MAX_EPOCH
    redis.call('HSET', KEYS[6], 't', 0, 'i', rounds)
    redis.call('PEXPIRE', KEYS[6], math.floor(open_for))
    round_exists = true
  end
end
local function round_id()
  if not round_exists then return 0 end
  return bounded(redis.call('HGET', KEYS[6], 'i'), 0, MAX_EPOCH)
end
local granted = 0
if state == HALF then
  if calls > 0 then
    -- A round tallies at most `probes` outcomes, the failures first: the
    -- order a summed delta lost, taken the cautious way (successes first
    -- could close a round on outcomes it never held, which a probe's
    -- failure reported with later successes would have reopened).
    round()
    local r = redis.call('HMGET', KEYS[6], 'o', 'x')
    local room = math.max(probes - bounded(r[1], 0, probes) - bounded(r[2], 0, probes), 0)
    local bad = math.min(failures, room)
    local good = math.min(calls - failures, room - bad)
    if bad > 0 then redis.call('HINCRBY', KEYS[6], 'x', bad) end
    if good > 0 then redis.call('HINCRBY', KEYS[6], 'o', good) end
  end
  if returned > 0 and round_exists and round_id() == bounded(arg.round, 0, MAX_EPOCH) then
    if redis.call('HINCRBY', KEYS[6], 't', -returned) < 0 then redis.call('HSET', KEYS[6], 't', 0) end
  end
  if want > 0 then
    round()
    local now_taken = redis.call('HINCRBY', KEYS[6], 't', want)
    local over = math.max(now_taken - probes, 0)
    granted = math.max(want - over, 0)
    if granted < want then redis.call('HINCRBY', KEYS[6], 't', granted - want) end
  end
end

if deposits > 0 then
  redis.call('HINCRBY', KEYS[2], 'd' .. bspan .. bb, deposits)
  sums.d = sums.d + deposits
end
if retries > 0 then
  redis.call('HINCRBY', KEYS[2], 'r' .. bspan .. bb, retries)
  sums.r = sums.r + retries
end
spent = math.min(math.max(spent - refilled, 0) + taken, max_tokens)
if hint >= 0 then cool = math.max(cool, now + math.min(hint, max_cool)) end

-- The pace's demand, per slot of two sync intervals: each pod's latest
-- report in a slot counted once, however often it synced in it. Two
-- intervals, so that a pod syncing every interval lands in every slot
-- even when a sync comes late: a pod missing from a slot it was asking in
-- would let the others' parts add up to the whole rate without its own.
-- The reply is the last whole slot's sums, and this pod's part of them.
-- Each pod's field holds "slot demand previous-slot previous-demand".
--
-- Bounded: what no reply needs any more (a slot's sums or a pod's report
-- older than the last whole slot) is swept a few fields a sync, from a
-- cursor kept in the hash, so bursty traffic (slots never followed by
-- their next-but-one) and pods gone for good (restarted under new names)
-- leave nothing behind; a hash grown past MAX_DEMAND_FIELDS anyway (more
-- pods asking than that, or planted) is dropped whole: the demand is
-- summed again within two slots, each pod an equal-part newcomer meanwhile.
local MAX_DEMAND_FIELDS, SWEEP, CURSOR = 10000, 16, ' cursor'
if redis.call('HLEN', KEYS[7]) > MAX_DEMAND_FIELDS then redis.call('DEL', KEYS[7]) end
local slot = math.floor(now / (2 * interval))
local prev = redis.call('HMGET', KEYS[7], 'D' .. (slot - 1), 'N' .. (slot - 1))
local total, wanting = bounded(prev[1], 0, 1e12), bounded(prev[2], 0, 1e9)
local last_slot, last_demand, before_slot, before_demand = -1, 0, -1, 0
-- (An upstream nobody asks Admit for, only reports on, costs no more.)
local last = (demand > 0 or total > 0) and redis.call('HGET', KEYS[7], pod)
if last then
  local a, b, c, d = string.match(last, '^(%d+) ([%d.e+-]+) (-?%d+) ([%d.e+-]+)$')
  last_slot, last_demand = tonumber(a) or -1, bounded(b, 0, 1e9)
  before_slot, before_demand = tonumber(c) or -1, bounded(d, 0, 1e9)
end
local own = 0
if last_slot == slot - 1 then
  own = last_demand
elseif last_slot == slot and before_slot == slot - 1 then
  own = before_demand
end
own = math.min(own, total)
if demand > 0 then
  for _, field in ipairs({'D' .. slot, 'N' .. slot}) do
    if redis.call('HEXISTS', KEYS[7], field) == 1 and not tonumber(redis.call('HGET', KEYS[7], field)) then
      redis.call('HDEL', KEYS[7], field)
    end
  end
  if last_slot == slot then
    redis.call('HINCRBYFLOAT', KEYS[7], 'D' .. slot, demand - last_demand)
  else
    redis.call('HINCRBYFLOAT', KEYS[7], 'D' .. slot, demand)
    redis.call('HINCRBY', KEYS[7], 'N' .. slot, 1)
    before_slot, before_demand = last_slot, last_demand
  end
  redis.call('HSET', KEYS[7], pod, slot .. ' ' .. demand .. ' ' .. before_slot .. ' ' .. before_demand)
  redis.call('HDEL', KEYS[7], 'D' .. (slot - 2), 'N' .. (slot - 2))
  -- A pod's name never holds a space (the words are split on them), so
  -- the cursor's field is no pod's.
  -- A cursor HSCAN would refuse (planted, or a mistake) starts over.
  local cursor = redis.call('HGET', KEYS[7], CURSOR)
  if not (cursor and #cursor <= 15 and string.match(cursor, '^%d+$')) then cursor = '0' end
  local scanned = redis.call('HSCAN', KEYS[7], cursor, 'COUNT', SWEEP)
  for k = 1, #scanned[2], 2 do
    local field, value = scanned[2][k], scanned[2][k + 1]
    local sum_of = string.match(field, '^[DN](%-?%d+)$')
    local reported = string.match(value, '^(%-?%d+) ')
    local of = tonumber(sum_of and tonumber(value) and sum_of or reported)
    if field ~= CURSOR and (not of or of < slot - 1) then redis.call('HDEL', KEYS[7], field) end
  end
  redis.call('HSET', KEYS[7], CURSOR, scanned[1])
  redis.call('PEXPIRE', KEYS[7], math.floor(20 * interval + 60000))
end

-- Aged out of the longest window a live bucket was counted in (a pod with
-- a shorter window must not drop the failing pods a longer one still
-- counts), and none from the future (a planted score of +inf never would
-- be); the quorum is the pods that failed within this pod's own window.
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - longest)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '(' .. now, '+inf')
local pods = redis.call('ZCOUNT', KEYS[3], '(' .. (now - window), now)

local left = 0
if state == OPEN then
  left = math.max(redis.call('PTTL', KEYS[4]), 0)
elseif state == HALF and round_exists then
  left = math.max(redis.call('PTTL', KEYS[6]), 0)
elseif state == HALF then
  left = open_for
end
local tally = {0, 0, 0}
if round_exists then
  local r = redis.call('HMGET', KEYS[6], 't', 'o', 'x')
  tally = {bounded(r[1], 0, probes), bounded(r[2], 0, MAX_SLOT), bounded(r[3], 0, MAX_SLOT)}
end

local differ = (stored[4] and stored[4] ~= fingerprint) and 1 or 0
redis.call('HSET', KEYS[1], 'e', epoch, 'c', cool, 't', spent, 'f', fingerprint, 'n', rounds)
-- A key made by this sync lives briefly unless it holds caution: a fleet
-- breaker not closed, a cool-down or spent tokens must outlive a quiet
-- spell, or every pod would admit again when it expired.
keep = math.max(window, 2 * open_for, ttl, cool - now) + 60000
local cautious = state ~= CLOSED or cool > now or spent > 0
if not stored[1] and not cautious then keep = math.min(keep, NEW_KEY_MS) end
redis.call('PEXPIRE', KEYS[1], math.floor(keep))
redis.call('PEXPIRE', KEYS[2], math.floor(math.max(window, ttl) + 60000))
redis.call('PEXPIRE', KEYS[3], math.floor(window + 60000))
if state ~= CLOSED then redis.call('PEXPIRE', KEYS[5], math.floor(keep)) end

local reply = {
  state = state, epoch = epoch, left = left, calls = sums.w, failures = math.min(sums.x, sums.w),
  pods = pods, taken = tally[1], successes = tally[2], probe_failures = tally[3],
  granted = granted, round = round_id(), deposits = sums.d, retries = sums.r, spent = spent,
  cooling = math.max(cool - now, 0), demand = math.floor(total * 1000), wanting = wanting,
  differ = differ, own = math.floor(own * 1000), born = born,
}
local out = {}
for k, name in ipairs(REPLY) do out[k] = reply[name] end
return out
