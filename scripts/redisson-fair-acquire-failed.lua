-- Redisson-style RFairLock acquireFailed (a tryLock with a wait gave up), written from
-- ../shared/notes/redisson-fairlock.md.
-- KEYS[1] = queue list redisson_lock_queue:{name}, KEYS[2] = timeout zset redisson_lock_timeout:{name}.
-- ARGV[1] = owner, ARGV[2] = wait ms the caller queued with.
-- Leaves the queue: everyone behind the caller is due one wait earlier. No reply.
local queue = redis.call('lrange', KEYS[1], 0, -1);
local behind = false;
for i = 1, #queue do
  if behind then
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i]);
  elseif queue[i] == ARGV[1] then
    behind = true;
  end;
end;
redis.call('zrem', KEYS[2], ARGV[1]);
redis.call('lrem', KEYS[1], 0, ARGV[1]);
return nil;
