-- The fleet store's script before the sync design (commit f9c830d), kept
-- only so that bench/fleet_per_call.py can measure the per-call design
-- beside the one that replaced it. The daemon never loads it.
--
-- The fleet's state of one (profile, upstream): one atomic step per call.
--
-- The same rules as the pure core's breaker, retry budget and cool-down
-- (squawk.policy), on counts every pod adds to, plus a quorum: the fleet
-- breaker opens only when failures came from at least min_pods distinct
-- pods within the window. Time is the server's (TIME), so the pods' clocks
-- never meet; every key expires when left alone.
--
-- KEYS[1]  the state, a JSON object (fields below)
-- KEYS[2]  the pods with a counted failure: a sorted set, score = its time
-- ARGV[1]  op, pod, verdict, hint, delay, deadline, then the config (see
--          fleet_store.py's _config_args) and its fingerprint, separated by
--          spaces
--   op       admit | record | retry (record, then guard a RETRY) | replay
--   verdict  retry: 0 not counted, 1 success, 2 failure, 3 throttled failure
--            (the token bucket and the cool-down count it, the breaker does
--            not); record, replay: successes
--   hint     the Retry-After to share, ms; -1 none
--   delay    retry: the RETRY's delay, ms; record, replay: failures
--   deadline retry: the time left before the step's deadline, ms; -1 none;
--            record, replay: throttled failures
--
-- Every pod should run the same breaker and budget settings for an
-- upstream: each call brings its own, and the state is read with them.
-- The state keeps the fingerprint of the settings it was last written
-- with (f), and every reply ends with 1 when the call's differ, else 0.
--
-- Replies (ms are whole milliseconds):
-- (each reply below, then that 1 or 0)
--   admit   {before, after, allowed, reason, wait, probe}
--           reason 0 none, 1 cooling down, 2 circuit open
--   record, replay  {before, after}
--   retry   {before, after, verdict, a, b}
--           verdict 0 granted (a = cool-down left), 1 breaker open (a = until
--           it half-opens), 2 budget spent (a, b = retries, calls; a token
--           bucket: a = tokens left in thousandths, b = -1), 3 the cool-down
--           outlasts the deadline (a = cool-down left)

local CLOSED, OPEN, HALF = 1, 2, 3
local BUDGET_BUCKETS = 10
-- What one replay call adds at most, per kind.
local MAX_REPLAY = 100
-- What one record call adds at most, per kind (a pod's writes, summed
-- while they wait), and what a stored bucket may hold.
local MAX_ADD, MAX_SLOT = 1e9, 1e12
-- A key this call creates lives at most this long; any later call on it
-- (an Admit, a report, from any pod) gives it what its state needs. A
-- name seen once costs the store two minutes, not a day's cool-down.
local NEW_KEY_MS = 120000

-- One argument, space-separated: each argument costs the client more to
-- send than the script spends reading it.
local arg = {}
for word in string.gmatch(ARGV[1], '%S+') do arg[#arg + 1] = word end
local op, pod = arg[1], arg[2]
local verdict, hint = tonumber(arg[3]), tonumber(arg[4])
local delay, deadline = tonumber(arg[5]), tonumber(arg[6])
local enabled = arg[7] == '1'
local failure_ratio, minimum_calls = tonumber(arg[8]), tonumber(arg[9])
local window, buckets = tonumber(arg[10]), tonumber(arg[11])
local open_for, probes = tonumber(arg[12]), tonumber(arg[13])
local close_ratio, min_pods = tonumber(arg[14]), tonumber(arg[15])
local token_bucket = arg[16] == 'token_bucket'
local ratio, floor, ttl = tonumber(arg[17]), tonumber(arg[18]), tonumber(arg[19])
local max_milli, refill = tonumber(arg[20]), tonumber(arg[21])
-- The profile's max_cool_down: the longest one hint cools the fleet.
local max_cool = tonumber(arg[22])
local fingerprint = arg[23]

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- s: breaker state, u: OPEN until / HALF_OPEN round end, p: probe slots
-- taken, ok/bad: probe outcomes, w: breaker window, b: ratio budget window,
-- t: tokens spent (thousandths), c: cool-down end, f: the settings'
-- fingerprint it was last written with. A window is a list of
-- {bucket start (ms), first count, second count}, oldest first: start times,
-- not bucket numbers, so pods whose windows differ (a rollout) still agree
-- on what is old.
local function fresh()
  return {s = CLOSED, u = 0, p = 0, ok = 0, bad = 0, w = {}, b = {}, t = 0, c = 0}
end

-- A number that compares as numbers do: cjson reads NaN and Infinity, and
-- NaN would carry into every sum and into the key's expiry.
local function finite(x)
  return type(x) == 'number' and x == x and x > -math.huge and x < math.huge
end

-- A window's buckets as stored, each checked: none from the future (a
-- bucket that starts after now never rolls out), no negative counts.
local function slots(v)
  if type(v) ~= 'table' then return nil end
  local out = {}
  for i, slot in ipairs(v) do
    if i > 1000 or type(slot) ~= 'table' or not finite(slot[1])
        or not finite(slot[2]) or not finite(slot[3]) then
      return nil
    end
    if slot[1] <= now then
      local first, second = math.max(slot[2], 0), math.max(slot[3], 0)
      out[#out + 1] = {slot[1], math.min(first, MAX_SLOT), math.min(second, MAX_SLOT)}
    end
  end
  return out
end

-- Only the fields this script writes, each checked: a value it did not
-- write (another program's key, a corrupted or oversized one) starts
-- afresh, and the times are held to what the rules allow, so no stored
-- value (nor a server clock that jumped back) can refuse for longer than
-- open_for or the profile's max_cool_down (a reload that lowers it ends a
-- longer cool-down already stored).
local function read(raw)
  local ok, v = pcall(cjson.decode, raw)
  if not ok or type(v) ~= 'table' or (v.s ~= CLOSED and v.s ~= OPEN and v.s ~= HALF) then
    return fresh()
  end
  for _, name in ipairs({'u', 'p', 'ok', 'bad', 't', 'c'}) do
    if not finite(v[name]) then return fresh() end
  end
  local w, b = slots(v.w), slots(v.b)
  if not w or not b then return fresh() end
  local function count(x) return math.min(math.max(x, 0), probes) end
  return {
    s = v.s, u = math.min(v.u, now + open_for), p = count(v.p), ok = count(v.ok), bad = count(v.bad),
    w = w, b = b, t = math.min(math.max(v.t, 0), max_milli), c = math.min(v.c, now + max_cool),
    f = type(v.f) == 'string' and #v.f <= 32 and v.f or nil,
  }
end

-- A key of another type under our name (another program's, a mistake) is
-- overwritten: left as it is, every call on the upstream would fail until
-- someone deleted it, for it has no expiry.
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then redis.call('DEL', KEYS[1]) end
local pods_type = redis.call('TYPE', KEYS[2]).ok
if pods_type ~= 'zset' and pods_type ~= 'none' then redis.call('DEL', KEYS[2]) end

local raw = redis.call('GET', KEYS[1])
local st = raw and read(raw) or fresh()

-- The start of bucket k (of n over span) in whole ms.
local function start(k, span, n)
  return math.floor(k * span / n)
end

local function roll(list, span, n)
  local oldest = start(math.floor(now * n / span) - n + 1, span, n)
  local kept = {}
  for _, slot in ipairs(list) do
    if slot[1] >= oldest then kept[#kept + 1] = slot end
  end
  return kept
end

local function add(list, span, n, first, second)
  list = roll(list, span, n)
  local current = start(math.floor(now * n / span), span, n)
  local last = list[#list]
  if last and last[1] >= current then
    last[2] = last[2] + first
    last[3] = last[3] + second
  else
    list[#list + 1] = {current, first, second}
  end
  return list
end

local function sums(list)
  local first, second = 0, 0
  for _, slot in ipairs(list) do
    first = first + slot[2]
    second = second + slot[3]
  end
  return first, second
end

-- A new state of the breaker starts a new count, of pods as of calls: the
-- quorum that opened it does not open it again after it closed.
local function enter(state, untl)
  st.s, st.u, st.p, st.ok, st.bad, st.w = state, untl, 0, 0, 0, {}
  redis.call('DEL', KEYS[2])
end

-- Time's own step: OPEN half-opens when its time is up, a half-open round
-- past its time starts over, the window drops its old buckets.
local function advance()
  if not enabled then
    if st.s ~= CLOSED then enter(CLOSED, 0) end
  elseif st.s == CLOSED then
    st.w = roll(st.w, window, buckets)
  elseif now >= st.u then
    enter(HALF, now + open_for)
  end
end

-- A half-open round's probe outcome (failed: 0 or 1).
local function probe_outcome(failed)
  st.ok, st.bad = st.ok + (1 - failed), st.bad + failed
  local tallied = st.ok + st.bad
  if tallied < probes then
    st.p = math.max(st.p, tallied)
  elseif st.ok / tallied >= close_ratio then
    enter(CLOSED, 0)
  else
    enter(OPEN, now + open_for)
  end
end

-- `good` successes, `bad` failures and `throttled` throttled failures
-- (which spend the token bucket and cool the upstream but stay out of the
-- breaker, as in the core): the order a pod's summed writes
-- lost, taken the cautious way. Closed, as if the successes came first (a
-- token bucket refills before it is spent; the breaker judges the window
-- with every failure in it, as it would have after the last one).
-- Half-open, the failures first: successes first could end a round as
-- CLOSED on outcomes the round never held, which a probe's failure
-- reported with later successes would have reopened.
local function record(good, bad, throttled)
  if bad + throttled > 0 and hint >= 0 then st.c = math.max(st.c, now + math.min(hint, max_cool)) end
  if token_bucket then
    st.t = math.min(math.max(st.t - good * refill, 0) + (bad + throttled) * 1000, max_milli)
  end
  while good + bad > 0 and enabled and st.s ~= OPEN do
    if st.s == CLOSED then
      st.w = add(st.w, window, buckets, good + bad, bad)
      if bad > 0 then redis.call('ZADD', KEYS[2], now, pod) end
      local calls, failures = sums(st.w)
      if calls >= minimum_calls and failures / calls >= failure_ratio then
        -- The quorum: one pod alone (a bad link, a broken deploy) opens only its own breaker.
        redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
        if redis.call('ZCARD', KEYS[2]) >= min_pods then enter(OPEN, now + open_for) end
      end
      return
    end
    -- Half-open: one at a time; at most `probes` of them end the round.
    if bad > 0 then bad = bad - 1; probe_outcome(1) else good = good - 1; probe_outcome(0) end
  end
end

local before = st.s
advance()
local reply

if op == 'admit' then
  local allowed, reason, wait, probe = 0, 0, 0, 0
  if st.c > now then
    reason, wait = 1, st.c - now
  elseif st.s == CLOSED then
    allowed = 1
  elseif st.s == HALF and st.p < probes then
    st.p, allowed, probe = st.p + 1, 1, 1
  else
    reason, wait = 2, st.u - now
  end
  if allowed == 1 and not token_bucket then
    st.b = add(st.b, ttl, BUDGET_BUCKETS, 1, 0)
  end
  reply = {before, st.s, allowed, reason, wait, probe}
elseif op == 'replay' then
  record(math.min(math.max(verdict, 0), MAX_REPLAY), math.min(math.max(delay, 0), MAX_REPLAY),
    math.min(math.max(deadline, 0), MAX_REPLAY))
  reply = {before, st.s}
elseif op == 'record' then
  record(math.min(math.max(verdict, 0), MAX_ADD), math.min(math.max(delay, 0), MAX_ADD),
    math.min(math.max(deadline, 0), MAX_ADD))
  reply = {before, st.s}
else
  record(verdict == 1 and 1 or 0, verdict == 2 and 1 or 0, verdict == 3 and 1 or 0)
  reply = {before, st.s}
  if op == 'retry' then
    if st.s == OPEN then
      reply = {before, st.s, 1, st.u - now, 0}
    else
      local granted, a, b
      if token_bucket then
        granted = 2 * (max_milli - st.t) > max_milli
        a, b = max_milli - st.t, -1
      else
        st.b = roll(st.b, ttl, BUDGET_BUCKETS)
        local calls, retries = sums(st.b)
        local need = retries + 1 - floor
        granted = need <= 0 or (calls > 0 and need / calls <= ratio)
        a, b = retries, calls
      end
      local cooling = math.max(st.c - now, 0)
      if not granted then
        reply = {before, st.s, 2, a, b}
      elseif cooling > delay and deadline >= 0 and cooling > deadline then
        -- Fails on the deadline: spends no budget, as in the core.
        reply = {before, st.s, 3, cooling, 0}
      else
        if not token_bucket then st.b = add(st.b, ttl, BUDGET_BUCKETS, 0, 1) end
        reply = {before, st.s, 0, cooling, 0}
      end
    end
  end
end

local keep = math.max(window, 2 * open_for, ttl, st.c - now) + 60000
-- A key made by this call lives briefly unless it holds caution: an open or
-- half-open breaker, a cool-down or spent tokens must outlive a quiet spell,
-- or every pod would admit again when it expired.
local cautious = st.s ~= CLOSED or st.c > now or (token_bucket and st.t > 0)
if not raw and not cautious then keep = math.min(keep, NEW_KEY_MS) end
reply[#reply + 1] = (st.f and st.f ~= fingerprint) and 1 or 0
st.f = fingerprint
redis.call('SET', KEYS[1], cjson.encode(st), 'PX', math.floor(keep))
redis.call('PEXPIRE', KEYS[2], math.floor(math.min(window + 60000, keep)))
return reply
