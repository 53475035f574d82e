-- leave.lua: this process stops waiting: it leaves the line, and a key reserved for it is
-- passed on at once to the next in line (or let go), so that nobody waits for a process that
-- no longer wants the key. It settles every acquisition the process numbered so far: an
-- attempt still on its way cannot put the process back in line after it left, nor take the
-- key; one that took it already is let go.
-- ARGV[1]  this process's mark
-- ARGV[2]  the release channel, or '' to publish nothing
-- ARGV[3]  the command that publishes ('publish', or 'spublish' for sharded channels)
-- ARGV[4]  how long a reservation lasts, in milliseconds
-- ARGV[5]  the largest sequence number the process gave a locker so far ('' if none)
-- ARGV[6]  how long a settled mark lasts, in milliseconds
-- Returns 2 when a reservation for this process, or a key its abandoned attempt took, was
-- passed on, else 1.
local mark = ARGV[1]
settle(ARGV[5], ARGV[6])
dequeue(mark)
local holder = redis.call('get', K)
if holder == RESERVED .. mark then
    pass(holder, ARGV[4], ARGV[2], ARGV[3])
    return 2
end
-- A key held by an acquisition of this process that it numbered before it left is abandoned
-- (a late copy of an attempt it gave up took it): let it go too.
local n = numberOf(holder, mark)
if n and ARGV[5] ~= '' and n <= tonumber(ARGV[5]) then
    pass(holder, ARGV[4], ARGV[2], ARGV[3])
    return 2
end
return 1
