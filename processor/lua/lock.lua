-- lock.lua: take the lock if it is free and hand out a fencing token.
-- KEYS[1]  the lock key, DLOCK_<type>_<target>
-- KEYS[2]  the fencing counter beside it, {DLOCK_<type>_<target>}:fence
-- KEYS[3]  the waiting mark beside it, {DLOCK_<type>_<target>}:want
-- ARGV[1]  the locker (this acquisition's unique value)
-- ARGV[2]  the lease in milliseconds
-- ARGV[3]  how long the fencing counter is kept, in milliseconds
-- ARGV[4]  this process's name, left in the waiting mark when the key is held ('' for none)
-- Returns the new token (> 0) when the lock was taken, 0 when another locker holds it.
-- The token is max(counter + 1, server clock in microseconds): it keeps increasing when the
-- counter expires or Redis restarts empty, as long as the server clock does not go back.
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    if ARGV[4] ~= '' then
        redis.call('set', KEYS[3], ARGV[4], 'PX', ARGV[2])
    end
    return 0
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local token = tonumber(redis.call('get', KEYS[2]) or '0') + 1
if now > token then
    token = now
end
redis.call('set', KEYS[2], string.format('%.0f', token), 'PX', ARGV[3])
return token
