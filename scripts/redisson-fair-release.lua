-- Redisson-style RFairLock unlock, written from ../shared/notes/redisson-fairlock.md.
-- KEYS[1] = lock, KEYS[2] = queue list, KEYS[3] = timeout zset,
-- KEYS[4] = channel prefix redisson_lock__channel:{name}, KEYS[5] = unlock latch
-- redisson_unlock_latch:{name}:<request id>.
-- ARGV[1] = message ('0'), ARGV[2] = lease ms for the holds left, ARGV[3] = owner,
-- ARGV[4] = now (client clock, ms), ARGV[5] = 'publish' or 'spublish', ARGV[6] = latch PX ms.
-- nil if not the owner; 0 if holds remain (lease reset); 1 when released or already free.
-- A release leaves the key absent for the first in the queue and tells only that one, on its own
-- channel KEYS[4]:<owner>; it does not pop it (its next tryLock does).
local done = redis.call('get', KEYS[5]);
if done ~= false then return tonumber(done) end;
local now = tonumber(ARGV[4]);
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
local function tell_first()
  local head = redis.call('lindex', KEYS[2], 0);
  if head ~= false then
    redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1]);
  end;
end;
if redis.call('exists', KEYS[1]) == 0 then
  tell_first();
  redis.call('set', KEYS[5], 1, 'px', ARGV[6]);
  return 1;
end;
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end;
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  redis.call('set', KEYS[5], 0, 'px', ARGV[6]);
  return 0;
end;
redis.call('del', KEYS[1]);
redis.call('set', KEYS[5], 1, 'px', ARGV[6]);
tell_first();
return 1;
