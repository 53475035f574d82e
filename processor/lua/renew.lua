-- renew.lua: renew the lease if the key still holds this locker (the expander's renewal, an
-- Extend, or a renewal before a pass within this process), reserving a new block of fencing
-- tokens if asked. With yield set, and another process in line, give the key to the first in
-- line instead (the hand-off limit is reached) and join the line again at its end: this
-- process still has goroutines that want the key. A renewal only ever lengthens the key's
-- life, so copies of it that arrive late or twice cut nothing short.
-- ARGV[1]  the locker
-- ARGV[2]  its sequence number
-- ARGV[3]  the lease in milliseconds
-- ARGV[4]  how long the fencing counter is kept, in milliseconds
-- ARGV[5]  how many fencing tokens to reserve ('0' for none)
-- ARGV[6]  '1' to yield to the first process in line, if there is one
-- ARGV[7]  this process's mark
-- ARGV[8]  how long a reservation lasts, in milliseconds
-- ARGV[9]  the release channel, or '' to publish nothing
-- ARGV[10] the command that publishes ('publish', or 'spublish' for sharded channels)
-- ARGV[11] how long a line entry lives unless renewed, in milliseconds
-- ARGV[12] how long a settled mark lasts, in milliseconds
-- ARGV[13] the last fencing token this process handed out ('' if unknown)
-- ARGV[14] with yield: a fresh sequence number of the owner for this check
-- Returns {1, first token of the new block or 0} when renewed, {2, 0} when yielded, {0, 0}
-- when the key no longer holds the locker, {-1, 0} when this request came late or twice: the
-- locker was settled (let go already), or this very yield check ran before. (A yield check
-- marks its own number whatever it decides, so that a copy of one that found nobody in line
-- cannot give the key away later, while the tenure goes on.)
local locker, seq, mark = ARGV[1], ARGV[2], ARGV[7]
local yield = ARGV[6] == '1' and ARGV[14] ~= ''
if yield then
    -- a check that ran before, or one its process settled since (it left the line: a check
    -- arriving after that must not put it back)
    local checked = tonumber(redis.call('get', CHECK) or '-1')
    if tonumber(ARGV[14]) <= checked or settled(ARGV[14]) then
        return {-1, 0}
    end
    redis.call('set', CHECK, ARGV[14], 'PX', math.max(tonumber(ARGV[12]), redis.call('pttl', CHECK)))
end
if redis.call('get', K) ~= locker then
    if settled(seq) and not forced(locker) then
        return {-1, 0}
    end
    return {0, 0}
end
if yield then
    dequeue(mark)
    purge()
    if redis.call('zrange', LINE, 0, 0)[1] then
        unreserve(ARGV[13])
        settle(seq, ARGV[12])
        pass(locker, ARGV[8], ARGV[9], ARGV[10])
        enqueue(mark, ARGV[11])
        return {2, 0}
    end
end
lengthen(K, ARGV[3])
lengthen(FENCE, ARGV[4])
if tonumber(ARGV[5]) > 0 then
    return {1, tokens(ARGV[5], ARGV[4])}
end
return {1, 0}
