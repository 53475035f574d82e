-- probe.lua: the retry poller's check: is the key free? If not, leave the waiting mark so
-- the holder's process knows another process waits.
-- KEYS[1]  the lock key
-- KEYS[2]  the waiting mark
-- ARGV[1]  this process's name ('' for no mark)
-- ARGV[2]  how long the mark lasts, in milliseconds
-- Returns 1 when the key is free, 0 when it is held.
if redis.call('exists', KEYS[1]) == 0 then
    return 1
end
if ARGV[1] ~= '' then
    redis.call('set', KEYS[2], ARGV[1], 'PX', ARGV[2])
end
return 0
