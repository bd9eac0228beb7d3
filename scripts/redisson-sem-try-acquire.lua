-- RSemaphore tryAcquire(permits): the counter alone, no owner, no lease.
-- KEYS[1] = semaphore. ARGV[1] = permits.
-- Reply: 1 when the count was at least ARGV[1] (decremented by it), else 0.
--
-- Extracted from Redisson 66863978b4a92093b97c1f8c96f182a77e81d50e,
-- redisson/src/main/java/org/redisson/RedissonSemaphore.java, tryAcquireAsync0(int permits).
-- Below these comment lines, each line is one of the Java string literals
-- the script is concatenated from, verbatim (trailing spaces included):
-- joining those lines without their newlines gives Redisson's script byte
-- for byte (tests/redisson_semaphores.rs runs it that way); run as the file
-- stands, it is the same Lua with line breaks added between tokens.
local value = redis.call('get', KEYS[1]); 
if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then 
local val = redis.call('decrby', KEYS[1], ARGV[1]); 
return 1; 
end; 
return 0;
