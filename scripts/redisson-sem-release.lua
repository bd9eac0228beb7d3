-- RSemaphore release(permits): adds to the counter (creating it) and
-- publishes the new count.
-- KEYS[1] = semaphore, KEYS[2] = channel (redisson_sc:{name}).
-- ARGV[1] = permits, ARGV[2] = 'publish'. Reply: nil.
--
-- Extracted from Redisson 66863978b4a92093b97c1f8c96f182a77e81d50e,
-- redisson/src/main/java/org/redisson/RedissonSemaphore.java, releaseAsync(int permits).
-- Below these comment lines, each line is one of the Java string literals
-- the script is concatenated from, verbatim (trailing spaces included):
-- joining those lines without their newlines gives Redisson's script byte
-- for byte (tests/redisson_semaphores.rs runs it that way); run as the file
-- stands, it is the same Lua with line breaks added between tokens.
local value = redis.call('incrby', KEYS[1], ARGV[1]); 
redis.call(ARGV[2], KEYS[2], value); 
