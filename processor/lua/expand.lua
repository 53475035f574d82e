-- expand.lua: renew the lease if the key still holds this locker.
-- KEYS[1]  the lock key
-- ARGV[1]  the locker
-- ARGV[2]  the lease in milliseconds
-- Returns 1 when renewed, 0 when the key is gone or holds another locker.
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
