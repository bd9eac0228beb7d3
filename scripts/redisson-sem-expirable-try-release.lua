-- RPermitExpirableSemaphore tryRelease(permitId): gives one permit back.
-- KEYS[1] = semaphore, KEYS[2] = channel, KEYS[3] = timeout set.
-- ARGV[1] = permit id, ARGV[2] = 1, ARGV[3] = now, unix ms,
-- ARGV[4] = 'publish'.
-- Reply: 0 if the id is not in the timeout set (nothing changed); else
-- the id is removed, the count incremented and published, and the reply
-- is 1, or 0 when its lease had ended by ARGV[3].
-- Names (RedissonObject.prefixName / suffixName, `name` the semaphore's key):
-- timeout set = {name}:timeout, channel = redisson_sc:{name}; when `name`
-- has a '{', they are name:timeout and redisson_sc:name.
--
-- Extracted from Redisson 66863978b4a92093b97c1f8c96f182a77e81d50e,
-- redisson/src/main/java/org/redisson/RedissonPermitExpirableSemaphore.java, tryReleaseAsync(String permitId).
-- Below these comment lines, each line is one of the Java string literals
-- the script is concatenated from, verbatim (trailing spaces included):
-- joining those lines without their newlines gives Redisson's script byte
-- for byte (tests/redisson_semaphores.rs runs it that way); run as the file
-- stands, it is the same Lua with line breaks added between tokens.
local expire = redis.call('zscore', KEYS[3], ARGV[1]);
local removed = redis.call('zrem', KEYS[3], ARGV[1]);
if tonumber(removed) ~= 1 then 
return 0;
end;
local value = redis.call('incrby', KEYS[1], ARGV[2]); 
redis.call(ARGV[4], KEYS[2], value); 
if tonumber(expire) <= tonumber(ARGV[3]) then 
return 0;
end;
return 1;
