-- RSemaphore / RPermitExpirableSemaphore trySetPermits: sets the count once.
-- KEYS[1] = semaphore, KEYS[2] = channel.
-- ARGV[1] = permits, ARGV[2] = 'publish'.
-- Reply: 1 when the key was missing (set to ARGV[1], ARGV[1] published),
-- 0 when it exists (nothing changed).
-- Names (RedissonObject.prefixName / suffixName, `name` the semaphore's key):
-- timeout set = {name}:timeout, channel = redisson_sc:{name}; when `name`
-- has a '{', they are name:timeout and redisson_sc:name.
--
-- Extracted from Redisson 66863978b4a92093b97c1f8c96f182a77e81d50e,
-- redisson/src/main/java/org/redisson/RedissonPermitExpirableSemaphore.java, trySetPermitsAsync(int permits).
-- Below these comment lines, each line is one of the Java string literals
-- the script is concatenated from, verbatim (trailing spaces included):
-- joining those lines without their newlines gives Redisson's script byte
-- for byte (tests/redisson_semaphores.rs runs it that way); run as the file
-- stands, it is the same Lua with line breaks added between tokens.
-- RedissonSemaphore.java's trySetPermitsAsync(int) is the same script, byte for byte.
local value = redis.call('get', KEYS[1]); 
if (value == false) then 
redis.call('set', KEYS[1], ARGV[1]); 
redis.call(ARGV[2], KEYS[2], ARGV[1]); 
return 1;
end;
return 0;
