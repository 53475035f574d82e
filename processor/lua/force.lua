-- force.lua: an operator's last resort: let the key go if it still holds the locker the
-- operator saw (as State reports it), as a release does: to the first process in line, or
-- free. The holder is not told here; it learns of the loss at its next renewal or release,
-- which find the key gone. (Its acquisition is deliberately not settled: a settled
-- acquisition's release answers as a repeated release does, and the holder would never learn
-- of the loss.) A second copy of this request finds the locker gone and changes nothing, so
-- it can never remove a later holder's key.
-- ARGV[1]  the locker to remove
-- ARGV[2]  the release channel, or '' to publish nothing
-- ARGV[3]  the command that publishes ('publish', or 'spublish' for sharded channels)
-- ARGV[4]  how long a reservation lasts, in milliseconds
-- Returns 1 when the key held the locker and was let go, 0 otherwise.
if redis.call('get', K) ~= ARGV[1] then
    return 0
end
pass(ARGV[1], ARGV[4], ARGV[2], ARGV[3])
return 1
