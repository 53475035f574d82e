-- expand.lua: renew the lease if the key still holds this locker. A renewal only ever
-- lengthens the key's life, never shortens it: it sets the expiry to at least now + the lease,
-- so a copy that arrives late or twice (a client's retry, a delayed packet) cannot cut short
-- what a later renewal or an Extend set. A holder counts its lease from the send of its last
-- successful renewal, and the key lives at least that long whatever arrives after it.
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter (kept as long as the key lives, and a little longer)
-- ARGV[1]  the locker
-- ARGV[2]  the lease in milliseconds
-- ARGV[3]  how long the fencing counter is kept, in milliseconds
-- Returns 1 when renewed, 0 when the key is gone or holds another locker.
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
if redis.call('pttl', KEYS[2]) < tonumber(ARGV[3]) then
    redis.call('pexpire', KEYS[2], ARGV[3])
end
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
end
return 1
