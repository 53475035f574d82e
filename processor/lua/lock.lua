-- lock.lua: take the lock if it is free, or reserved for this process by a holder that yielded
-- to it, and hand out a fencing token; when it is held, leave this process's waiting mark (a
-- hint that another process waits, never a claim to the key).
-- KEYS[1]  the lock key, DLOCK_<type>_<target>
-- KEYS[2]  the fencing counter beside it, {DLOCK_<type>_<target>}:fence
-- KEYS[3]  the waiting mark beside it, {DLOCK_<type>_<target>}:want
-- KEYS[4]  the locker's owner's settled mark, {DLOCK_<type>_<target>}:done:<owner>
-- ARGV[1]  the locker (this acquisition's unique value, <owner><sequence number>)
-- ARGV[2]  the lease in milliseconds
-- ARGV[3]  how long the fencing counter is kept, in milliseconds
-- ARGV[4]  this process's mark ('' for none)
-- ARGV[5]  how long a waiting mark lasts, in milliseconds
-- ARGV[6]  the locker's sequence number ('' when it has none)
-- ARGV[7]  '1' to leave the mark when the key is held
-- Returns the token (> 0) when the lock was taken; 0 when another locker holds it; -1 when
-- the acquisition was settled already (released or given back: this request came late).
-- The token is max(counter + 1, server clock in microseconds): it keeps increasing when the
-- counter expires or Redis restarts empty, as long as the server clock does not go back.
if ARGV[6] ~= '' and tonumber(ARGV[6]) <= tonumber(redis.call('get', KEYS[4]) or '-1') then
    return -1
end
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    local holder = redis.call('get', KEYS[1])
    if holder == ARGV[1] then
        -- this very attempt ran before and its reply was lost (the client sent it again):
        -- it is ours, with a new token and at least its lease from now (never less than the
        -- key has: a renewal or an Extend may have lengthened it since the first copy ran)
        if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
            redis.call('pexpire', KEYS[1], ARGV[2])
        end
    elseif ARGV[4] ~= '' and holder == 'reserved|' .. ARGV[4] then
        -- a holder yielded the key to this process (handover.lua): take it with our locker
        redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
    else
        if ARGV[7] == '1' and ARGV[4] ~= '' then
            redis.call('set', KEYS[3], ARGV[4], 'PX', ARGV[5])
        end
        return 0
    end
end
if ARGV[4] ~= '' and redis.call('get', KEYS[3]) == ARGV[4] then
    redis.call('del', KEYS[3]) -- our own mark is served
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local token = tonumber(redis.call('get', KEYS[2]) or '0') + 1
if now > token then
    token = now
end
redis.call('set', KEYS[2], string.format('%.0f', token), 'PX', ARGV[3])
return token
