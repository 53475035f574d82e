-- handover.lua: pass a held lock from one acquisition of this process to the next, in one
-- round trip instead of a release and an acquire, unless another process is waiting for it.
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter
-- KEYS[3]  the waiting mark
-- ARGV[1]  the old locker
-- ARGV[2]  the new locker
-- ARGV[3]  the lease in milliseconds
-- ARGV[4]  how long the fencing counter is kept, in milliseconds
-- ARGV[5]  the release channel, or '' to publish nothing
-- ARGV[6]  this process's name
-- ARGV[7]  '1' if the lock should go to another process that waits, '0' to keep it here
-- Returns the new token (> 0) when handed over; 0 when the key no longer holds the old
-- locker; -1 when another process waits: then the key was released and the release published.
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
if ARGV[7] == '1' then
    local want = redis.call('get', KEYS[3])
    if want and want ~= ARGV[6] then
        redis.call('del', KEYS[1], KEYS[3])
        if ARGV[5] ~= '' then
            redis.call('publish', ARGV[5], ARGV[1])
        end
        return -1
    end
end
redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local token = tonumber(redis.call('get', KEYS[2]) or '0') + 1
if now > token then
    token = now
end
redis.call('set', KEYS[2], string.format('%.0f', token), 'PX', ARGV[4])
return token
