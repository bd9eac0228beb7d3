-- Redisson-style RReadWriteLock write tryLock, written from
-- ../shared/notes/redisson-protocol.md.
-- KEYS[1] = lock, ARGV[1] = lease ms, ARGV[2] = the owner's write field
-- (<owner>:write). nil when taken or re-entered; else the busy lock's PTTL.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + tonumber(ARGV[1]))
  return nil
end
return redis.call('pttl', KEYS[1])
