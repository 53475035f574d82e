-- probe.lua: the retry poller's check: is the key free (or reserved for this process)? If
-- not, leave the waiting mark.
-- KEYS[1]  the lock key
-- KEYS[2]  the waiting mark
-- ARGV[1]  this process's mark ('' to leave none)
-- ARGV[2]  how long the mark lasts, in milliseconds
-- Returns 1 when the key is free or reserved for this process, 0 when it is held.
local holder = redis.call('get', KEYS[1])
if not holder or (ARGV[1] ~= '' and holder == 'reserved|' .. ARGV[1]) then
    return 1
end
if ARGV[1] ~= '' then
    redis.call('set', KEYS[2], ARGV[1], 'PX', ARGV[2])
end
return 0
