-- unmark.lua: remove this process's waiting mark when it stops waiting.
-- KEYS[1]  the waiting mark
-- ARGV[1]  this process's mark
-- Returns 1 when our mark was removed, else 0.
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
