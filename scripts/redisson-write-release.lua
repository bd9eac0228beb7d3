-- Redisson-style RReadWriteLock write unlock, written from
-- ../shared/notes/redisson-protocol.md.
-- KEYS[1] = lock, KEYS[2] = channel (redisson_rwlock:{lock}),
-- ARGV[1] = message (1), ARGV[2] = lease ms, ARGV[3] = the owner's write
-- field. nil if not the writer; 0 if write holds remain; 1 when the write
-- lock ended (the hash deleted and ARGV[1] published, or left in read mode
-- for the writer's own read holds).
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('publish', KEYS[2], ARGV[1])
  return 1
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local n = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if n > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], ARGV[1])
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
return 1
