-- unlock.lua: let the lock go if the key still holds this locker: grant it to the process
-- that left the waiting mark, or delete it; and tell the waiters.
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter
-- KEYS[3]  the waiting mark
-- ARGV[1]  the locker
-- ARGV[2]  the release channel, or '' to publish nothing (then nothing is granted)
-- ARGV[3]  this process's locker prefix (its own mark is not granted to)
-- ARGV[4]  the lease in milliseconds
-- ARGV[5]  how long the fencing counter is kept, in milliseconds
-- Returns 1 when deleted, 2 when granted, 0 when the key is gone or holds another locker.
-- Messages: "R|<locker>" for a deletion, "G|<grantee locker>|<token>" for a grant.
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
if ARGV[2] ~= '' then
    local want = redis.call('get', KEYS[3])
    if want and string.sub(want, 1, #ARGV[3]) ~= ARGV[3] then
        redis.call('set', KEYS[1], want, 'PX', ARGV[4])
        redis.call('del', KEYS[3])
        local t = redis.call('time')
        local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
        local token = tonumber(redis.call('get', KEYS[2]) or '0') + 1
        if now > token then
            token = now
        end
        local s = string.format('%.0f', token)
        redis.call('set', KEYS[2], s, 'PX', ARGV[5])
        redis.call('publish', ARGV[2], 'G|' .. want .. '|' .. s)
        return 2
    end
end
redis.call('del', KEYS[1])
if ARGV[2] ~= '' then
    redis.call('publish', ARGV[2], 'R|' .. ARGV[1])
end
return 1
