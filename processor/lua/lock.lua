-- lock.lua: take the lock if it is free, or if a release granted it to this process, and hand
-- out a fencing token.
-- KEYS[1]  the lock key, DLOCK_<type>_<target>
-- KEYS[2]  the fencing counter beside it, {DLOCK_<type>_<target>}:fence
-- KEYS[3]  the waiting mark beside it, {DLOCK_<type>_<target>}:want
-- ARGV[1]  the locker (this acquisition's unique value)
-- ARGV[2]  the lease in milliseconds
-- ARGV[3]  how long the fencing counter is kept, in milliseconds
-- ARGV[4]  this process's mark prefix: its waiting marks, and so the lockers granted to it,
--          start with it ('' to leave no mark)
-- ARGV[5]  the locker to leave as this process's waiting mark
-- ARGV[6]  how long a waiting mark lasts, in milliseconds
-- Returns {token, locker} when the lock was taken (locker is ARGV[1], or the locker a release
-- granted to this process, whose lease is renewed), {0} when another locker holds it; then the
-- waiting mark is left, and a release may grant the lock to it.
-- The token is max(counter + 1, server clock in microseconds): it keeps increasing when the
-- counter expires or Redis restarts empty, as long as the server clock does not go back.
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    if ARGV[4] == '' then
        return {0}
    end
    local holder = redis.call('get', KEYS[1])
    if holder and string.sub(holder, 1, #ARGV[4]) == ARGV[4] then
        -- granted to us while we were not listening: take it
        redis.call('pexpire', KEYS[1], ARGV[2])
        return {tonumber(redis.call('get', KEYS[2]) or '0'), holder}
    end
    redis.call('set', KEYS[3], ARGV[5], 'PX', ARGV[6])
    return {0}
end
if ARGV[4] ~= '' then
    local want = redis.call('get', KEYS[3])
    if want and string.sub(want, 1, #ARGV[4]) == ARGV[4] then
        redis.call('del', KEYS[3]) -- our own mark is served
    end
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local token = tonumber(redis.call('get', KEYS[2]) or '0') + 1
if now > token then
    token = now
end
redis.call('set', KEYS[2], string.format('%.0f', token), 'PX', ARGV[3])
return {token, ARGV[1]}
