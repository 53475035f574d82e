-- inspect.lua: read what Redis holds for a lock, without changing anything.
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter
-- KEYS[3]  the waiting mark
-- Returns {holder or '', its remaining life in milliseconds (-2 when absent), the fencing
-- counter or '', the waiting mark or ''}.
return {
    redis.call('get', KEYS[1]) or '',
    redis.call('pttl', KEYS[1]),
    redis.call('get', KEYS[2]) or '',
    redis.call('get', KEYS[3]) or '',
}
