"""The Lua scripts of the Redis Streams queue: each one runs atomically on the server, which is what makes
admission exact across gateway replicas and a result stored exactly once.

Layout: every script gets the deployment's ten priority streams as KEYS (index = priority level, 1 most urgent),
all in one consumer group. A request is acknowledged and deleted in the same step, so a stream holds only
requests that are queued (never delivered) or pending (delivered, not completed): queued = XLEN - pending.
"""

# queued, pending = counts(streams, group). A stream that does not exist yet holds nothing.
_COUNTS = """
local function counts(streams, group)
  local queued, pending = 0, 0
  for _, stream in ipairs(streams) do
    if redis.call('EXISTS', stream) == 1 then
      local held = redis.call('XPENDING', stream, group)[1]
      queued = queued + redis.call('XLEN', stream) - held
      pending = pending + held
    end
  end
  return queued, pending
end
"""

# ARGV: group. Returns {queued, pending}.
COUNTS = (
    _COUNTS
    + """
local queued, pending = counts(KEYS, ARGV[1])
return {queued, pending}
"""
)

# ARGV: group, level, max_depth, request id, encoded request. Returns {1, at most the depth after} or {0, depth}
# (refused). The streams' lengths (queued + pending, a stream holds nothing else) bound the queued count from
# above: only when they reach max_depth are the pending ones counted. Ten XLENs instead of thirty calls on the
# way of every request, and the same answer. The group is created with the stream, from id 0, so no request
# can ever be added to a stream without one.
SUBMIT = (
    _COUNTS
    + """
local queued = 0
for _, stream in ipairs(KEYS) do
  queued = queued + redis.call('XLEN', stream)
end
if queued >= tonumber(ARGV[3]) then
  queued = counts(KEYS, ARGV[1])
  if queued >= tonumber(ARGV[3]) then
    return {0, queued}
  end
end
local stream = KEYS[tonumber(ARGV[2])]
if redis.call('EXISTS', stream) == 0 then
  redis.call('XGROUP', 'CREATE', stream, ARGV[1], '0', 'MKSTREAM')
end
redis.call('XADD', stream, '*', 'id', ARGV[4], 'request', ARGV[5])
return {1, queued + 1}
"""
)

# ARGV: group, consumer, count. Delivers up to count never-delivered requests, most urgent level first.
# Returns {{level, entry id, {field, value, ...}}, ...}.
TAKE = """
local wanted = tonumber(ARGV[3])
local taken = {}
for level, stream in ipairs(KEYS) do
  if wanted <= 0 then break end
  if redis.call('EXISTS', stream) == 1 then
    local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', wanted, 'STREAMS', stream, '>')
    if reply then
      for _, entry in ipairs(reply[1][2]) do
        table.insert(taken, {level, entry[1], entry[2]})
        wanted = wanted - 1
      end
    end
  end
end
return taken
"""

# ARGV: group. Creates each stream that does not exist yet with the group, as SUBMIT would, so an idle worker can
# block on all of them with one XREADGROUP.
ENSURE_GROUPS = """
for _, stream in ipairs(KEYS) do
  if redis.call('EXISTS', stream) == 0 then
    redis.call('XGROUP', 'CREATE', stream, ARGV[1], '0', 'MKSTREAM')
  end
end
return 1
"""

# ARGV: group, consumer, min idle ms, count. Claims up to count requests delivered at least min idle ms ago and
# never acknowledged, most urgent first. Returns {{level, entry id, {field, value, ...}, deliveries}, ...}.
RECLAIM = """
local wanted = tonumber(ARGV[4])
local claimed = {}
for level, stream in ipairs(KEYS) do
  if wanted <= 0 then break end
  if redis.call('EXISTS', stream) == 1 then
    local cursor = '0-0'
    repeat
      local reply = redis.call('XAUTOCLAIM', stream, ARGV[1], ARGV[2], ARGV[3], cursor, 'COUNT', wanted)
      cursor = reply[1]
      for _, entry in ipairs(reply[2]) do
        if entry[2] then  -- Redis 6.2 lists an entry deleted under the group with no fields; it is not work
          local info = redis.call('XPENDING', stream, ARGV[1], entry[1], entry[1], 1)[1]
          table.insert(claimed, {level, entry[1], entry[2], info[4]})
          wanted = wanted - 1
        end
      end
    until cursor == '0-0' or wanted <= 0
  end
end
return claimed
"""

# KEYS: per completion, the request's stream and its result list; then, when the batch's usage record rides along,
# the usage stream. ARGV: group, result ttl ms, the number of completions, per completion its entry id and encoded
# result, then the encoded usage record (when given). Each result is stored, then its request acknowledged and
# deleted, only while the delivery is still pending: a second completion (a worker presumed dead finishing after
# its work was reclaimed) stores nothing. The usage record is appended to the usage stream in the same atomic
# step when at least one result was stored, so answers and their bill exist together or not at all (a script's
# writes reach the AOF and replicas as one MULTI). One call completes a whole batch (one round trip). Returns,
# per completion, 1 when stored and 0 when the delivery had already been completed.
COMPLETE = """
local count = tonumber(ARGV[3])
local stored, any = {}, false
for i = 1, count do
  local stream, result = KEYS[2 * i - 1], KEYS[2 * i]
  local entry, encoded = ARGV[2 * i + 2], ARGV[2 * i + 3]
  if #redis.call('XPENDING', stream, ARGV[1], entry, entry, 1) == 0 then
    table.insert(stored, 0)
  else
    redis.call('RPUSH', result, encoded)
    redis.call('PEXPIRE', result, ARGV[2])
    redis.call('XACK', stream, ARGV[1], entry)
    redis.call('XDEL', stream, entry)
    table.insert(stored, 1)
    any = true
  end
end
if any and #KEYS > 2 * count then
  redis.call('XADD', KEYS[2 * count + 1], '*', 'record', ARGV[2 * count + 4])
end
return stored
"""
