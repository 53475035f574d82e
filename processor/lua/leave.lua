-- leave.lua: this process stops waiting: it leaves the line, and a key reserved for it is
-- passed on at once to the next in line (or let go), so that nobody waits for a process that
-- no longer wants the key.
-- ARGV[1]  this process's mark
-- ARGV[2]  the release channel, or '' to publish nothing
-- ARGV[3]  the command that publishes ('publish', or 'spublish' for sharded channels)
-- ARGV[4]  how long a reservation lasts, in milliseconds
-- Returns 2 when a reservation for this process was passed on, else 1.
local mark = ARGV[1]
dequeue(mark)
if redis.call('get', K) == RESERVED .. mark then
    pass(RESERVED .. mark, ARGV[4], ARGV[2], ARGV[3])
    return 2
end
return 1
