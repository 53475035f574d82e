-- handover.lua: pass a held lock from one acquisition of this process to the next, in one
-- round trip instead of a release and an acquire, unless it should go to another process.
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter
-- KEYS[3]  the waiting mark
-- ARGV[1]  the old locker
-- ARGV[2]  the new locker
-- ARGV[3]  the lease in milliseconds
-- ARGV[4]  how long the fencing counter is kept, in milliseconds
-- ARGV[5]  the release channel, or '' to publish nothing
-- ARGV[6]  this process's locker prefix
-- ARGV[7]  '1' if the lock should go to another process that left a waiting mark
-- Returns the new token (> 0) when handed over; 0 when the key no longer holds the old
-- locker; -1 when it went to the waiting process instead: granted to it (and
-- "G|<locker>|<token>" published), or, with no channel, deleted for its poller to find.
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
local want = false
if ARGV[7] == '1' then
    want = redis.call('get', KEYS[3])
    if want and string.sub(want, 1, #ARGV[6]) == ARGV[6] then
        want = false
    end
end
if want and ARGV[5] == '' then
    redis.call('del', KEYS[1], KEYS[3])
    return -1
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local token = tonumber(redis.call('get', KEYS[2]) or '0') + 1
if now > token then
    token = now
end
local s = string.format('%.0f', token)
redis.call('set', KEYS[2], s, 'PX', ARGV[4])
if want then
    redis.call('set', KEYS[1], want, 'PX', ARGV[3])
    redis.call('del', KEYS[3])
    redis.call('publish', ARGV[5], 'G|' .. want .. '|' .. s)
    return -1
end
redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3])
return token
