-- RPermitExpirableSemaphore getPermits: the total, available plus held.
-- KEYS[1] = semaphore, KEYS[2] = timeout set, KEYS[3] = channel.
-- ARGV[1] = now, unix ms, ARGV[2] = 'publish'.
-- Gives back every permit whose lease ended by ARGV[1] first (publishing
-- the new count when positive). Reply: available + members of the timeout
-- set; 0 when the semaphore is missing.
-- Names (RedissonObject.prefixName / suffixName, `name` the semaphore's key):
-- timeout set = {name}:timeout, channel = redisson_sc:{name}; when `name`
-- has a '{', they are name:timeout and redisson_sc:name.
--
-- Extracted from Redisson 66863978b4a92093b97c1f8c96f182a77e81d50e,
-- redisson/src/main/java/org/redisson/RedissonPermitExpirableSemaphore.java, getPermitsAsync().
-- Below these comment lines, each line is one of the Java string literals
-- the script is concatenated from, verbatim (trailing spaces included):
-- joining those lines without their newlines gives Redisson's script byte
-- for byte (tests/redisson_semaphores.rs runs it that way); run as the file
-- stands, it is the same Lua with line breaks added between tokens.
local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); 
if #expiredIds > 0 then 
redis.call('zrem', KEYS[2], unpack(expiredIds)); 
local value = redis.call('incrby', KEYS[1], #expiredIds); 
if tonumber(value) > 0 then 
redis.call(ARGV[2], KEYS[3], value); 
end;
end; 
local available = redis.call('get', KEYS[1]); 
if available == false then 
return 0 
end;
local acquired = redis.call('zcount', KEYS[2], 0, '+inf'); 
if acquired == false then 
return tonumber(available) 
end;
return tonumber(available) + acquired;
