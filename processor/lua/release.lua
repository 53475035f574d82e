-- release.lua: let the lock go if the key still holds this locker, and tell the waiters.
-- Also gives back an attempt whose answer was lost: if the key does not hold the locker, a
-- tombstone makes that attempt fail should it still reach Redis (lock.lua, handover.lua).
-- KEYS[1]  the lock key
-- KEYS[2]  the locker's tombstone, {DLOCK_<type>_<target>}:void:<locker>
-- ARGV[1]  the locker
-- ARGV[2]  the release channel, or '' to publish nothing
-- ARGV[3]  how long the tombstone lasts in milliseconds, or '0' to leave none
-- Returns 1 when deleted, 0 when the key is gone or holds another locker.
-- Message: "R|<locker>".
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1])
    if ARGV[2] ~= '' then
        redis.call('publish', ARGV[2], 'R|' .. ARGV[1])
    end
    return 1
end
if ARGV[3] ~= '0' then
    redis.call('set', KEYS[2], '1', 'PX', ARGV[3])
end
return 0
