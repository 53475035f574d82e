-- unlock.lua: delete the key if it still holds this locker, and tell the waiters.
-- KEYS[1]  the lock key
-- ARGV[1]  the locker
-- ARGV[2]  the release channel, {DLOCK_<type>_<target>}:released, or '' to publish nothing
-- Returns 1 when released, 0 when the key is gone or holds another locker.
-- The message is the releasing locker, so a process can ignore its own releases.
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
if ARGV[2] ~= '' then
    redis.call('publish', ARGV[2], ARGV[1])
end
return 1
