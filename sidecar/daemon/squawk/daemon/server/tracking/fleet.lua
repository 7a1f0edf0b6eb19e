-- The fleet's counts of one (profile, upstream): sums and leases, no rules.
--
-- Every pod decides from memory by the core's rules (squawk.policy.fleet);
-- every sync interval it adds what it saw since its last sync here and
-- reads the fleet's sums back. This script only adds, ages out what is
-- older than a window, and hands out leases: it never judges a breaker or a
-- budget. Time is the server's (TIME), so the pods' clocks never meet;
-- every key expires when left alone. The script Redis runs is this file
-- and fleet_sums.lua after it (the sync's sums), behind the field names
-- fleet_wire.py declares.
--
-- KEYS  s the state (hash: e epoch, c cool-down end ms, t tokens spent in
--         thousandths, f the settings' fingerprint, n the rounds begun,
--         b when it was made)
--       c the windows' counts (hash: w<bucket> calls, x<bucket> failures of
--         the breaker's window; d<bucket> first calls, r<bucket> retries of
--         the ratio budget's; a bucket is "window:buckets:number", the
--         window it was counted in)
--       p the pods with a failure in the window (sorted set, score = ms)
--       o the fleet breaker's OPEN lease (expires when it half-opens)
--       h the fleet breaker is not CLOSED (OPEN or HALF_OPEN)
--       r the half-open round (hash: i its id, t slots taken, o successes, x failures;
--         expires open_for after it began: a round without a verdict restarts)
--       d the pace's demand (hash: D<slot> calls/s, N<slot> pods, and each
--         pod's "slot demand previous-slot previous-demand" last written;
--         a slot is two sync intervals; " cursor" the sweep's HSCAN cursor)
-- ARGV[1] words separated by spaces: the op (sync, move or keep), then
--   the fields FIELDS[op] names, in its order (declared with their meaning
--   in fleet_wire.py, which puts FIELDS and REPLY above this script).
--
-- sync replies the fields REPLY names, in its order: state, epoch, left,
--   calls, failures, pods, taken, successes, probe_failures, granted,
--   round, deposits, retries, spent, cooling, demand (thousandths of
--   calls/s), wanting, differ, own (this pod's part of demand,
--   thousandths), born (when the state was made, server ms modulo 1e9: a
--   state made anew, after a FLUSHALL or a restart that lost it, has
--   another); state 1 CLOSED, 2 OPEN, 3 HALF_OPEN; left: OPEN,
--   ms until it half-opens, HALF_OPEN, until the round restarts; round: the
--   half-open round's id (slots leased in a round are void once it
--   restarted, and `returned` slots go back only to the round of the id
--   sent).
-- move replies {1} when made, {0} when the fleet left that epoch first.
-- keep writes back caution a pod held that the store lost (the state made
--   anew under it): an OPEN lease of open_left ms, if the breaker is still
--   CLOSED in that epoch, and a cool-down of cool_left ms, if longer than
--   the one stored; it replies {1} when it wrote either, else {0}.

local CLOSED, OPEN, HALF = 1, 2, 3
local BUDGET_BUCKETS = 10
-- What one sync adds at most, per kind, and what a stored count may hold.
local MAX_ADD, MAX_SLOT = 1e9, 1e12
-- A key a sync creates lives at most this long unless it holds caution.
local NEW_KEY_MS = 120000

local words = {}
for word in string.gmatch(ARGV[1], '%S+') do words[#words + 1] = word end
if not FIELDS[words[1]] then return redis.error_reply('fleet.lua: no such op') end
local arg = {}
for k, name in ipairs(FIELDS[words[1]]) do arg[name] = words[k] end
local op, pod = arg.op, arg.pod

local function bounded(x, low, high)
  x = tonumber(x)
  if not x or x ~= x then return low end
  return math.min(math.max(x, low), high)
end

local window, buckets = bounded(arg.window, 1, 1e12), bounded(arg.buckets, 1, 1000)
local ttl, open_for = bounded(arg.ttl, 1, 1e12), bounded(arg.open_for, 1, 1e12)
local probes, max_cool = bounded(arg.probes, 1, 1e9), bounded(arg.max_cool, 0, 1e12)
local max_tokens, interval = bounded(arg.max_tokens, 0, 1e12), bounded(arg.interval, 1, 1e6)
local fingerprint = arg.fingerprint or ''

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- A key of another type under our name (another program's, a mistake) is
-- overwritten: left as it is, every sync of the upstream would fail.
local types = {'hash', 'hash', 'zset', 'string', 'string', 'hash', 'hash'}
for k = 1, 7 do
  local t = redis.call('TYPE', KEYS[k]).ok
  if t ~= 'none' and t ~= types[k] then redis.call('DEL', KEYS[k]) end
end

local stored = redis.call('HMGET', KEYS[1], 'e', 'c', 't', 'f', 'n', 'b')
-- The epoch wraps well within what a reply carries exactly.
local MAX_EPOCH = 1e9
local epoch = bounded(stored[1], 0, MAX_EPOCH)
local rounds = bounded(stored[5], 0, MAX_EPOCH)
-- Never 0, which a reply of no state would read as.
local born = bounded(stored[6], 0, MAX_EPOCH)
if born == 0 or born ~= math.floor(born) then
  born = now % (MAX_EPOCH - 1) + 1
  redis.call('HSET', KEYS[1], 'b', born)
end
-- Held to what the rules allow: no stored value (nor a clock that jumped
-- back) cools longer than max_cool, and a reload that lowers it ends a
-- longer cool-down already stored.
local cool = math.min(bounded(stored[2], 0, 1e15), now + max_cool)
local spent = bounded(stored[3], 0, max_tokens)
local state = CLOSED
if redis.call('EXISTS', KEYS[4]) == 1 then
  state = OPEN
elseif redis.call('EXISTS', KEYS[5]) == 1 then
  state = HALF
end

local keep = math.max(window, 2 * open_for, ttl, cool - now) + 60000

-- A lease lives no longer than the rules allow, whoever wrote it: an OPEN
-- lease or a round without an expiry (another program's, a mistake) would
-- otherwise hold the upstream shut for good.
local function held(key, most)
  local left = redis.call('PTTL', key)
  if left == -1 or left > most then redis.call('PEXPIRE', key, math.floor(most)) end
end
if state == OPEN then held(KEYS[4], open_for) end
if state ~= CLOSED then held(KEYS[5], keep) end
held(KEYS[6], open_for)

-- Drop the breaker window's buckets (a new state starts a new count).
-- The failing pods stay until the breaker closes (they age out of the
-- window meanwhile): while it is not CLOSED they only say who opened it.
local function clear_window()
  local all = redis.call('HKEYS', KEYS[2])
  for _, field in ipairs(all) do
    local kind = string.sub(field, 1, 1)
    if kind == 'w' or kind == 'x' then redis.call('HDEL', KEYS[2], field) end
  end
end

if op == 'move' then
  local want, to = bounded(arg.epoch, 0, 1e15), bounded(arg.to, 0, 3)
  if want ~= epoch then return {0} end
  if to == OPEN and state ~= OPEN then
    redis.call('SET', KEYS[4], '1', 'PX', math.floor(open_for))
    redis.call('SET', KEYS[5], '1', 'PX', math.floor(keep))
    redis.call('DEL', KEYS[6])
    clear_window()
  elseif to == CLOSED and state == HALF then
    redis.call('DEL', KEYS[3], KEYS[5], KEYS[6])
    clear_window()
  else
    return {0}
  end
  redis.call('HSET', KEYS[1], 'e', (epoch + 1) % MAX_EPOCH)
  redis.call('PEXPIRE', KEYS[1], math.floor(keep))
  return {1}
end

if op == 'keep' then
  -- Held to the rules as every other write: no longer than open_for, nor
  -- than max_cool_down.
  local want = bounded(arg.epoch, 0, 1e15)
  local open_left, cool_left = bounded(arg.open_left, 0, open_for), bounded(arg.cool_left, 0, max_cool)
  local made = 0
  if open_left >= 1 and state == CLOSED and want == epoch then
    redis.call('SET', KEYS[4], '1', 'PX', math.floor(open_left))
    redis.call('SET', KEYS[5], '1', 'PX', math.floor(keep))
    redis.call('DEL', KEYS[6])
    clear_window()
    redis.call('HSET', KEYS[1], 'e', (epoch + 1) % MAX_EPOCH)
    made = 1
  end
  if cool_left >= 1 and now + cool_left > cool then
    cool = now + cool_left
    redis.call('HSET', KEYS[1], 'c', cool)
    made = 1
  end
  if made == 1 then
    keep = math.max(window, 2 * open_for, ttl, cool - now) + 60000
    redis.call('PEXPIRE', KEYS[1], math.floor(keep))
  end
  return {made}
end
