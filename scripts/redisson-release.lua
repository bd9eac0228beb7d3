-- Redisson-style RLock unlock.
-- KEYS[1] = lock, KEYS[2] = channel, ARGV[1] = message, ARGV[2] = lease ms, ARGV[3] = owner.
-- nil if not the owner; 0 if holds remain (lease reset); 1 when released
-- (key deleted and the message published).
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end;
local c = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if c > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  return 0;
else
  redis.call('del', KEYS[1]);
  redis.call('publish', KEYS[2], ARGV[1]);
  return 1;
end
