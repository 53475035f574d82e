-- force.lua: an operator's last resort: let the key go if it still holds the locker the
-- operator saw (as State reports it), as a release does: to the first process in line, or
-- free. The removed acquisition is settled, so that no late copy of its request can take the
-- key back, and named in {K}:forced:<owner>, so that its holder's next renewal or release answers
-- "gone" (its holder is not told here: it learns of the loss then). A second copy of this
-- request finds the locker gone and changes nothing, so it can never remove a later holder's
-- key. KEYS[5] and KEYS[7] are those of the removed locker's owner.
-- ARGV[1]  the locker to remove
-- ARGV[2]  the release channel, or '' to publish nothing
-- ARGV[3]  the command that publishes ('publish', or 'spublish' for sharded channels)
-- ARGV[4]  how long a reservation lasts, in milliseconds
-- ARGV[5]  its sequence number ('' for a locker of another form)
-- ARGV[6]  how long a settled mark lasts, in milliseconds
-- Returns 1 when the key held the locker and was let go, 0 otherwise.
if redis.call('get', K) ~= ARGV[1] then
    return 0
end
settle(ARGV[5], ARGV[6])
redis.call('set', FORCED, ARGV[1], 'PX', ARGV[6])
pass(ARGV[1], ARGV[4], ARGV[2], ARGV[3])
return 1
