-- release.lua: let the key go if it still holds this locker — to the first process in line
-- (reserved for it; only it is woken) or free — and settle the acquisition, so that no request
-- of it (or of an older acquisition of its owner) that reaches Redis later can take the key.
-- The same script gives back an acquisition whose outcome is unknown (its reply was lost, or
-- its caller gave up): settled either way, and let go if it holds the key.
-- ARGV[1]  the locker
-- ARGV[2]  its sequence number ('' for a locker of another form)
-- ARGV[3]  the release channel, or '' to publish nothing
-- ARGV[4]  the command that publishes ('publish', or 'spublish' for sharded channels)
-- ARGV[5]  how long the settled mark lasts, in milliseconds
-- ARGV[6]  how long a reservation lasts, in milliseconds
-- ARGV[7]  the last fencing token this holder handed out ('' if unknown)
-- Returns {1, the mark the key is reserved for or ''} when let go, {-1, ''} when settled
-- already (this release ran before and its reply was lost), {0, ''} when the key is gone or
-- holds another locker (an operator's removal of it included).
local locker, seq = ARGV[1], ARGV[2]
if redis.call('get', K) ~= locker then
    if settled(seq) and not forced(locker) then
        return {-1, ''}
    end
    settle(seq, ARGV[5])
    return {0, ''}
end
unreserve(ARGV[7])
settle(seq, ARGV[5])
return {1, pass(locker, ARGV[6], ARGV[3], ARGV[4])}
