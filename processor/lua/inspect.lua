-- inspect.lua: read what Redis holds for a lock, without changing anything.
-- Arguments: max_listed.
-- Returns {holder or '', its remaining life in milliseconds (-2 when absent), the fencing
-- counter or '', the live entries of the line, first in line first}.
local waitingList = {}
for _, m in ipairs(redis.call('zrange', LINE, 0, tonumber(A.max_listed) - 1)) do
    if waiting(m) then
        waitingList[#waitingList + 1] = m
    end
end
return {
    redis.call('get', K) or '',
    redis.call('pttl', K),
    redis.call('get', FENCE) or '',
    waitingList,
}
