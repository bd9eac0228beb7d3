-- Redisson-style RLock tryLock, written from ../shared/notes/redisson-protocol.md.
-- KEYS[1] = lock, ARGV[1] = lease ms, ARGV[2] = owner.
-- Takes a free lock or re-enters one's own: nil; else the busy lock's PTTL.
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
return redis.call('pttl', KEYS[1]);
