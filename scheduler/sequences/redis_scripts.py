"""The Lua scripts of the sequence transport on Redis (redis_sequences.py): admission, taking and cancelling, each
one atomic step, so gateway replicas and workers never race on a deployment's waiting line."""

# Redis' clock in milliseconds, for the preferences' graces.
NOW_MS = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""
# KEYS: waiting set, request key, arrivals counter, preferences hash, backlog hash. ARGV: request id, level, max
# waiting, payload, ttl ms, preferred worker ('' for none), grace ms, LoRA adapter ('' for the base). Returns -1 when
# queued, else the count already waiting (refused). A preference reads `worker|grace end ms|adapter`.
SUBMIT = (
    NOW_MS
    + """
local waiting = redis.call('ZCARD', KEYS[1])
if waiting >= tonumber(ARGV[3]) then return waiting end
local arrival = redis.call('INCR', KEYS[3]) % 1099511627776
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
redis.call('ZADD', KEYS[1], tonumber(ARGV[2]) * 1099511627776 + arrival, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[6] .. '|' .. (now_ms() + tonumber(ARGV[7])) .. '|' .. ARGV[8])
  redis.call('HINCRBY', KEYS[5], ARGV[6], 1)
  redis.call('PEXPIRE', KEYS[4], ARGV[5])
  redis.call('PEXPIRE', KEYS[5], ARGV[5])
end
return -1
"""
)
# Forgets a waiting sequence's preference, if it has one (KEYS: preferences hash, backlog hash; the id is `id`).
FORGET_PREFERENCE = """
local function forget_preference(id)
  local preference = redis.call('HGET', KEYS[3], id)
  if not preference then return nil end
  local worker = string.sub(preference, 1, string.find(preference, '|', 1, true) - 1)
  redis.call('HDEL', KEYS[3], id)
  if redis.call('HINCRBY', KEYS[4], worker, -1) <= 0 then redis.call('HDEL', KEYS[4], worker) end
  return preference
end
"""
# KEYS: waiting set, taken set, preferences hash, backlog hash, loads hash. ARGV: max items, request key prefix,
# event stream prefix, the encoded Started event naming the worker, ttl ms, the worker's id, how many of the
# line's first ids to look at, stale seconds. Returns the taken requests' payloads (a request whose key expired is
# skipped). Each taken sequence's stream gets the Started event in the same step: a worker killed right after
# taking it is still known as the one that took it, so the gateway relaying it notices its death.
TAKE = (
    NOW_MS
    + FORGET_PREFERENCE
    + """
local now = now_ms()
local reports = {}  -- worker -> its decoded live load report, or false (none, or stale)
local function live_report(worker)
  if reports[worker] == nil then
    local report = redis.call('HGET', KEYS[5], worker)
    local load = report and cjson.decode(report)
    reports[worker] = (load and now / 1000 - load['reported_at'] <= tonumber(ARGV[8])) and load or false
  end
  return reports[worker]
end
local open = {}  -- worker -> whether others may take its sequences (routing.others_may_take), as at the first ask
local function others_may_take(worker)
  if open[worker] == nil then
    local load = live_report(worker)
    local backlog = tonumber(redis.call('HGET', KEYS[4], worker) or '0')
    open[worker] = (not load) or (type(load['free_rows']) == 'number' and backlog > load['free_rows'])
  end
  return open[worker]
end
local function holds(load, adapter)
  for _, pair in ipairs(load and load['adapters'] or {}) do
    if pair[1] == adapter then return true end
  end
  return false
end
local function may_take_adapter(adapter, preferred)  -- routing.may_take_adapter, for this worker (ARGV[6])
  if adapter == '' or not holds(live_report(preferred), adapter) then return true end
  return holds(live_report(ARGV[6]), adapter)
end
local taken = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[7]) - 1)) do
  if #taken >= tonumber(ARGV[1]) then break end
  local preference = redis.call('HGET', KEYS[3], id)
  local may = true
  if preference then
    local worker, grace, adapter = string.match(preference, '^([^|]*)|([^|]*)|?(.*)$')
    grace = tonumber(grace)
    may = worker == ARGV[6] or ((now >= grace or others_may_take(worker)) and may_take_adapter(adapter, worker))
  end
  if may then
    redis.call('ZREM', KEYS[1], id)
    forget_preference(id)
    local key = ARGV[2] .. id
    local payload = redis.call('GET', key)
    if payload then
      redis.call('DEL', key)
      redis.call('SADD', KEYS[2], id)
      local events = ARGV[3] .. id
      redis.call('XADD', events, '*', 'e', ARGV[4])
      redis.call('PEXPIRE', events, ARGV[5])
      table.insert(taken, payload)
    end
  end
end
return taken
"""
)
# KEYS: waiting set, request key, preferences hash, backlog hash, cancel key. ARGV: request id, ttl ms.
CANCEL = (
    FORGET_PREFERENCE
    + """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then forget_preference(ARGV[1]) end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[5], 1, 'PX', ARGV[2])
"""
)
