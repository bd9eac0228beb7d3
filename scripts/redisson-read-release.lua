-- Redisson-style RReadWriteLock read unlock, written from
-- ../shared/notes/redisson-protocol.md.
-- KEYS[1] = lock, KEYS[2] = channel (redisson_rwlock:{lock}),
-- KEYS[3] = the owner's lease key prefix, KEYS[4] = the lease key prefix of
-- every owner ({lock}), ARGV[1] = message (0), ARGV[2] = owner.
-- nil if the owner holds no read hold; 0 if the lock stays; 1 when the hash
-- was deleted (and ARGV[1] published). The hash's TTL becomes the longest
-- lease key left.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('publish', KEYS[2], ARGV[1])
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if n == 0 then
  redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (n + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local longest = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local holds = tonumber(redis.call('hget', KEYS[1], field))
    if type(holds) == 'number' then
      for i = holds, 1, -1 do
        longest = math.max(longest, redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return 0
  end
  if mode == 'write' then
    return 0
  end
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
