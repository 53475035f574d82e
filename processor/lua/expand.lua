-- expand.lua: renew the lease if the key still holds this locker.
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter (kept as long as the key lives, and a little longer)
-- ARGV[1]  the locker
-- ARGV[2]  the lease in milliseconds
-- ARGV[3]  how long the fencing counter is kept, in milliseconds
-- Returns 1 when renewed, 0 when the key is gone or holds another locker.
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('pexpire', KEYS[2], ARGV[3])
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
