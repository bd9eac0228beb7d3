-- RCountDownLatch countDown: DECR; at zero or below the key is deleted;
-- at exactly zero ARGV[1] is published.
-- KEYS[1] = latch, KEYS[2] = channel (redisson_countdownlatch__channel__{name}).
-- ARGV[1] = 0 (ZERO_COUNT_MESSAGE), ARGV[2] = 'publish'. Reply: nil.
--
-- Extracted from Redisson 66863978b4a92093b97c1f8c96f182a77e81d50e,
-- redisson/src/main/java/org/redisson/RedissonCountDownLatch.java, countDownAsync().
-- Below these comment lines, each line is one of the Java string literals
-- the script is concatenated from, verbatim (trailing spaces included):
-- joining those lines without their newlines gives Redisson's script byte
-- for byte (tests/redisson_semaphores.rs runs it that way); run as the file
-- stands, it is the same Lua with line breaks added between tokens.
local v = redis.call('decr', KEYS[1]);
if v <= 0 then redis.call('del', KEYS[1]) end;
if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;
