-- release.lua: let the lock go if the key still holds this locker, tell the waiters, and
-- settle the acquisition: raise its owner's settled mark to its sequence number, so that any
-- request of it (or of an older acquisition of the same owner) that reaches Redis later is
-- refused (lock.lua, handover.lua). The same script gives back an acquisition whose outcome
-- is unknown (its reply was lost, or its caller gave up).
-- KEYS[1]  the lock key
-- KEYS[2]  the locker's owner's settled mark, {DLOCK_<type>_<target>}:done:<owner>
-- ARGV[1]  the locker
-- ARGV[2]  the release channel, or '' to publish nothing
-- ARGV[3]  the locker's sequence number ('' when it has none)
-- ARGV[4]  how long the settled mark lasts, in milliseconds
-- ARGV[5]  the command that publishes ('publish', or 'spublish' for sharded channels)
-- Returns 1 when deleted; 2 when the acquisition was settled already (this release ran
-- before and its reply was lost); 0 when the key is gone or holds another locker.
-- Message: "R|<locker>".
-- The mark only ever rises, and its life only ever grows (a release with a shorter lease does
-- not cut short the protection of an earlier one with a longer lease).
local done = tonumber(redis.call('get', KEYS[2]) or '-1')
local function settle()
    if ARGV[3] ~= '' and tonumber(ARGV[3]) > done then
        redis.call('set', KEYS[2], ARGV[3], 'PX', math.max(tonumber(ARGV[4]), redis.call('pttl', KEYS[2])))
    end
end
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1])
    if ARGV[2] ~= '' then
        redis.call(ARGV[5], ARGV[2], 'R|' .. ARGV[1])
    end
    settle()
    return 1
end
if ARGV[3] ~= '' and tonumber(ARGV[3]) <= done then
    return 2
end
settle()
return 0
