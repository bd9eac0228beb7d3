-- RCountDownLatch trySetCount(count).
-- KEYS[1] = latch, KEYS[2] = channel, always
-- redisson_countdownlatch__channel__{name} (braces added even when `name`
-- has some). ARGV[1] = 1 (NEW_COUNT_MESSAGE), ARGV[2] = count,
-- ARGV[3] = 'publish'.
-- Reply: 1 when the key was missing (set, ARGV[1] published), else 0.
--
-- Extracted from Redisson 66863978b4a92093b97c1f8c96f182a77e81d50e,
-- redisson/src/main/java/org/redisson/RedissonCountDownLatch.java, trySetCountAsync(long count).
-- Below these comment lines, each line is one of the Java string literals
-- the script is concatenated from, verbatim (trailing spaces included):
-- joining those lines without their newlines gives Redisson's script byte
-- for byte (tests/redisson_semaphores.rs runs it that way); run as the file
-- stands, it is the same Lua with line breaks added between tokens.
if redis.call('exists', KEYS[1]) == 0 then 
redis.call('set', KEYS[1], ARGV[2]); 
redis.call(ARGV[3], KEYS[2], ARGV[1]); 
return 1 
else 
return 0 
end
