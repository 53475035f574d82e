-- inspect.lua: read what Redis holds for a lock, without changing anything.
-- ARGV[1]  how many entries of the line to list at most
-- Returns {holder or '', its remaining life in milliseconds (-2 when absent), the fencing
-- counter or '', the live entries of the line, first in line first}.
local live = {}
for _, m in ipairs(redis.call('zrangebyscore', DUE, '(' .. NOW_MS, '+inf')) do
    live[m] = true
end
local waiting = {}
for _, m in ipairs(redis.call('zrange', LINE, 0, tonumber(ARGV[1]) - 1)) do
    if live[m] then
        waiting[#waiting + 1] = m
    end
end
return {
    redis.call('get', K) or '',
    redis.call('pttl', K),
    redis.call('get', FENCE) or '',
    waiting,
}
