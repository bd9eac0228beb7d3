-- Redisson-style RFairLock tryLock, written from ../shared/notes/redisson-fairlock.md.
-- KEYS[1] = lock, KEYS[2] = queue list redisson_lock_queue:{name},
-- KEYS[3] = timeout zset redisson_lock_timeout:{name}.
-- ARGV[1] = lease ms, ARGV[2] = owner, ARGV[3] = wait ms (threadWaitTime or the caller's
-- waitTime), ARGV[4] = now (client clock, ms), ARGV[5] = 'ttl' (lock, tryLock with a wait:
-- queues the caller) or 'bool' (tryLock without a wait: never queues).
-- nil when taken or re-entered; else 'ttl': the ms to wait before retrying (max(0, PTTL) when
-- already queued; on enqueue the time until the one before is due or the lock's PTTL), 'bool': 1.
local now = tonumber(ARGV[4]);
local wait = tonumber(ARGV[3]);
-- Drop stale heads: a head whose deadline has passed is gone; nobody else's deadline changes.
while true do
  local head = redis.call('lindex', KEYS[2], 0);
  if head == false then break end;
  local deadline = redis.call('zscore', KEYS[3], head);
  if deadline ~= false and tonumber(deadline) <= now then
    redis.call('zrem', KEYS[3], head);
    redis.call('lpop', KEYS[2]);
  else
    break;
  end;
end;
-- Free, and nobody queued or the caller first in the queue: take it, and everyone behind moves
-- up one turn.
if redis.call('exists', KEYS[1]) == 0
    and (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
  redis.call('lpop', KEYS[2]);
  redis.call('zrem', KEYS[3], ARGV[2]);
  local rest = redis.call('zrange', KEYS[3], 0, -1);
  for i = 1, #rest do
    redis.call('zincrby', KEYS[3], -wait, rest[i]);
  end;
  redis.call('hset', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if ARGV[5] == 'bool' then return 1 end;
-- Queued already: come back when the lock's lease is over (at once when it is free).
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
  return math.max(0, redis.call('pttl', KEYS[1]));
end;
-- Join the tail: due when the one before is due (or the lock's lease ends) plus wait.
local last = redis.call('lindex', KEYS[2], -1);
local ttl;
local last_deadline = false;
if last ~= false and last ~= ARGV[2] then
  last_deadline = redis.call('zscore', KEYS[3], last);
end;
if last_deadline ~= false then
  ttl = tonumber(last_deadline) - now;
else
  ttl = redis.call('pttl', KEYS[1]);
end;
if redis.call('zadd', KEYS[3], ttl + wait + now, ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2]);
end;
return ttl;
