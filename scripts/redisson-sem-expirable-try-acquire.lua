-- RPermitExpirableSemaphore tryAcquire: takes permits, one member of the
-- timeout set per permit id, scored by the unix ms its lease ends.
-- KEYS[1] = semaphore (the available count), KEYS[2] = timeout set,
-- KEYS[3] = channel.
-- ARGV[1] = permits wanted (n), ARGV[2] = lease end, unix ms (client clock
-- now + lease, or 922337203685477 for none), ARGV[3] = now, unix ms,
-- ARGV[4] = 922337203685477 (nonExpirableTimeout), ARGV[5] = 'publish'
-- (or 'spublish'), ARGV[6..5+n] = the n permit ids (16 random bytes each).
-- First gives back up to n permits whose lease ended by ARGV[3] (publishing
-- the new count when positive). Reply: 'OK' when taken; else ':<score>'
-- of the soonest lease end when that is not 922337203685477; else nil.
-- Names (RedissonObject.prefixName / suffixName, `name` the semaphore's key):
-- timeout set = {name}:timeout, channel = redisson_sc:{name}; when `name`
-- has a '{', they are name:timeout and redisson_sc:name.
--
-- Extracted from Redisson 66863978b4a92093b97c1f8c96f182a77e81d50e,
-- redisson/src/main/java/org/redisson/RedissonPermitExpirableSemaphore.java, tryAcquireAsync(List<String> ids, long timeoutDate).
-- Below these comment lines, each line is one of the Java string literals
-- the script is concatenated from, verbatim (trailing spaces included):
-- joining those lines without their newlines gives Redisson's script byte
-- for byte (tests/redisson_semaphores.rs runs it that way); run as the file
-- stands, it is the same Lua with line breaks added between tokens.
local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); 
if #expiredIds > 0 then 
redis.call('zrem', KEYS[2], unpack(expiredIds)); 
local value = redis.call('incrby', KEYS[1], #expiredIds); 
if tonumber(value) > 0 then 
redis.call(ARGV[5], KEYS[3], value); 
end;
end; 
local value = redis.call('get', KEYS[1]); 
if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then 
redis.call('decrby', KEYS[1], ARGV[1]); 
for i = 6, #ARGV, 1 do 
redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); 
end; 
local ttl = redis.call('pttl', KEYS[1]); 
if ttl > 0 then 
redis.call('pexpire', KEYS[2], ttl); 
end; 
return 'OK'; 
end; 
local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); 
if v[1] ~= nil and v[2] ~= ARGV[4] then 
return ':' .. tostring(v[2]); 
end 
return nil;
