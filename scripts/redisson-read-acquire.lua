-- Redisson-style RReadWriteLock read tryLock, written from
-- ../shared/notes/redisson-protocol.md.
-- KEYS[1] = lock, KEYS[2] = the owner's lease key prefix
-- ({lock}:<owner>:rwlock_timeout), ARGV[1] = lease ms, ARGV[2] = owner,
-- ARGV[3] = the owner's write field (<owner>:write).
-- Takes a read hold when nobody writes (or the caller writes): nil; else the
-- busy lock's PTTL.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1])
  local left = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1])))
  return nil
end
return redis.call('pttl', KEYS[1])
