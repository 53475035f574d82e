-- unmark.lua: remove this process's waiting mark when it stops waiting, so no release grants
-- the lock to a process that no longer listens.
-- KEYS[1]  the waiting mark
-- ARGV[1]  this process's locker prefix
-- Returns 1 when a mark of ours was removed, else 0.
local want = redis.call('get', KEYS[1])
if want and string.sub(want, 1, #ARGV[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
