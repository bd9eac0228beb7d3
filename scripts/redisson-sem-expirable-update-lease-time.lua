-- RPermitExpirableSemaphore updateLeaseTime(permitId, lease): a new lease
-- for a held permit.
-- KEYS[1] = semaphore, KEYS[2] = timeout set, KEYS[3] = channel.
-- ARGV[1] = permit id, ARGV[2] = new lease end, unix ms, ARGV[3] = now,
-- unix ms, ARGV[4] = 'publish'.
-- Gives back every permit whose lease ended by ARGV[3] first. Reply: 1 if
-- the id is (still) held and was rescored, else 0.
-- Names (RedissonObject.prefixName / suffixName, `name` the semaphore's key):
-- timeout set = {name}:timeout, channel = redisson_sc:{name}; when `name`
-- has a '{', they are name:timeout and redisson_sc:name.
--
-- Extracted from Redisson 66863978b4a92093b97c1f8c96f182a77e81d50e,
-- redisson/src/main/java/org/redisson/RedissonPermitExpirableSemaphore.java, updateLeaseTimeAsync(String permitId, long leaseTime, TimeUnit unit).
-- Below these comment lines, each line is one of the Java string literals
-- the script is concatenated from, verbatim (trailing spaces included):
-- joining those lines without their newlines gives Redisson's script byte
-- for byte (tests/redisson_semaphores.rs runs it that way); run as the file
-- stands, it is the same Lua with line breaks added between tokens.
local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, -1); 
if #expiredIds > 0 then 
redis.call('zrem', KEYS[2], unpack(expiredIds)); 
local value = redis.call('incrby', KEYS[1], #expiredIds); 
if tonumber(value) > 0 then 
redis.call(ARGV[4], KEYS[3], value); 
end;
end; 
local value = redis.call('zscore', KEYS[2], ARGV[1]); 
if (value ~= false) then 
redis.call('zadd', KEYS[2], ARGV[2], ARGV[1]); 
return 1;
end;
return 0;
