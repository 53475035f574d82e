-- inspect.lua: read what Redis holds for a lock, without changing anything.
-- Arguments: max_listed; channel and publish, to ask whether a waiting process listens.
-- Returns {holder or '', its remaining life in milliseconds (-2 when absent), the fencing
-- counter or '', the processes of the first max_listed entries of the line that are live
-- (isLive: the ones a release would grant the key to; not those whose time ran out, nor those
-- whose process stopped listening or, without listening, stopped renewing), first in line
-- first}. A counter no script writes is refused here as by every other script (counter), not
-- shown as absent; and a key beside the lock that holds another kind of value fails here as it
-- fails an acquisition (the line, the waiting attempts, the window: GET and HGET, O(1)).
counter()
redis.call('hget', WANT, '')
redis.call('get', GAP)
local waitingList = {}
for _, m in ipairs(redis.call('zrange', LINE, 0, tonumber(A.max_listed) - 1)) do
    local locker, lease, _, renewed, _, listened = waiting(m)
    if locker and isLive(m, lease, renewed, listened) then
        waitingList[#waitingList + 1] = m
    end
end
return {
    redis.call('get', K) or '',
    redis.call('pttl', K),
    redis.call('get', FENCE) or '',
    waitingList,
}
