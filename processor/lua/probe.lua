-- probe.lua: the retry poller's check: is the key free (or granted to this process)? If not,
-- leave the waiting mark.
-- KEYS[1]  the lock key
-- KEYS[2]  the waiting mark
-- ARGV[1]  this process's mark prefix ('' for no mark)
-- ARGV[2]  the locker to leave as the waiting mark
-- ARGV[3]  how long the mark lasts, in milliseconds
-- Returns 1 when the key is free or granted to this process, 0 when it is held.
local holder = redis.call('get', KEYS[1])
if not holder then
    return 1
end
if ARGV[1] == '' then
    return 0
end
if string.sub(holder, 1, #ARGV[1]) == ARGV[1] then
    return 1
end
redis.call('set', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 0
