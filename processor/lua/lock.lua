-- lock.lua: take the key if it is free, or reserved for this process (then say so: "T|<locker>|
-- <lease>", so that the others know it will not come free before that but by a release); when
-- it is held, settle this attempt (no copy of it that arrives later can take the key) and, to
-- wait, join the line. A process has one attempt or tenure of a key at a time, so a key held by
-- a later acquisition of the same owner makes this request a stale copy, refused (it must not
-- put its process in line behind itself).
-- ARGV[1]  the locker (this acquisition's unique value, <owner><sequence number>)
-- ARGV[2]  its sequence number ('' for a locker of another form)
-- ARGV[3]  the lease in milliseconds
-- ARGV[4]  how long the fencing counter is kept, in milliseconds
-- ARGV[5]  this process's mark ('' for none: no line, no reservation)
-- ARGV[6]  '1' to join the line when the key is held
-- ARGV[7]  how long a line entry lives unless renewed, in milliseconds
-- ARGV[8]  how many fencing tokens to reserve (1, or a block for passes within this process)
-- ARGV[9]  how long a settled mark lasts, in milliseconds
-- ARGV[10] the release channel, or '' to publish nothing
-- ARGV[11] the command that publishes ('publish', or 'spublish' for sharded channels)
-- Returns {1, first token} when taken; {0, place, life, holder} when held by another: this
-- process's place in line (0 first, -1 not in line), the key's remaining life in milliseconds
-- and the value under it; {-1, 0} when this acquisition was settled already (this request came
-- late).
local locker, seq, lease, mark = ARGV[1], ARGV[2], ARGV[3], ARGV[5]
if settled(seq) then
    return {-1, 0}
end
local holder = redis.call('get', K)
if holder == locker then
    -- this very attempt ran before and its reply was lost (the client sent it again): it is
    -- ours, with new tokens and at least its lease from now
    lengthen(K, lease)
    return {1, tokens(ARGV[8], ARGV[4])}
end
-- A key held by a later acquisition of the owner makes this request a stale copy.
local own = seq ~= '' and numberOf(holder, string.sub(locker, 1, #locker - #seq))
if own and own > tonumber(seq) then
    settle(seq, ARGV[9])
    return {-1, 0}
end
if not holder or (mark ~= '' and holder == RESERVED .. mark) then
    redis.call('set', K, locker, 'PX', lease)
    if mark ~= '' then
        dequeue(mark)
    end
    if holder and ARGV[10] ~= '' then
        -- the processes in line heard the key reserved for this one: it is taken, for a lease
        redis.call(ARGV[11], ARGV[10], 'T|' .. locker .. '|' .. lease)
    end
    return {1, tokens(ARGV[8], ARGV[4])}
end
settle(seq, ARGV[9])
local place = -1
if ARGV[6] == '1' and mark ~= '' then
    enqueue(mark, ARGV[7])
    purge()
    place = redis.call('zrank', LINE, mark) or -1
end
return {0, place, redis.call('pttl', K), holder}
