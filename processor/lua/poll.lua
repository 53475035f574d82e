-- poll.lua: the retry poller's check. Is the key free, or reserved for this process? If not,
-- renew this process's entry in the line, if it still has one (it never makes one: a poll that
-- arrives after its process left the line cannot put it back).
-- ARGV[1]  this process's mark ('' for none)
-- ARGV[2]  how long a line entry lives unless renewed, in milliseconds
-- Returns {state, place, life, holder}: state 1 free, 2 reserved for this process, 3 held and
-- this process in line (its entry renewed), 4 held and this process not in line; place, this
-- process's place in line (0 first, -1 not in line); life, the key's remaining life in
-- milliseconds; holder, the value under the key.
local mark = ARGV[1]
local holder = redis.call('get', K)
if not holder then
    return {1, -1, 0, ''}
end
local life = redis.call('pttl', K)
if mark ~= '' and holder == RESERVED .. mark then
    return {2, -1, life, holder}
end
if mark == '' then
    return {4, -1, life, holder}
end
purge()
local place = redis.call('zrank', LINE, mark)
if place then
    redis.call('zadd', DUE, 'XX', NOW_MS + tonumber(ARGV[2]), mark)
    lengthen(LINE, ARGV[2])
    lengthen(DUE, ARGV[2])
    return {3, place, life, holder}
end
return {4, -1, life, holder}
