-- leave.lua: this process stops waiting: it leaves the line, and every acquisition it
-- numbered up to upto is settled: an attempt still on its way cannot put it back in line, nor
-- take the key, nor be granted it; one that holds the key already (a grant it no longer
-- wants, or a late copy of an attempt it gave up) is let go to the next in line at once. An
-- entry made since, by a later attempt, stays.
-- With locker (and seq, origin), an acquisition of the process that held the key and whose
-- release went unanswered (it is sent again): if it is not settled and the key no longer holds
-- it, or holds it in a holding it did not begin with (taken anew), it was taken from its holder
-- before any release of it ran (lost by Redis: a failover, an empty restart). It is remembered
-- as a removed one (FORCED), as an operator's removal is, so that its release, which finds it
-- settled by this leave, answers gone rather than settled: its holder learns of the loss.
-- Arguments: mark, upto, done_ttl, fence_ttl, gap_every, gap_window, channel, publish, and
-- locker, seq, origin.
-- Returns {2, the locker granted or '', its first token or 0, the window or 0, the server µs of
-- the grant or 0} when a key it held was passed on, else {1}.
counter() -- (first: a counter dlock never wrote stops the script before it writes)
if A.locker ~= '' and not settled(A.seq) then -- (before the settle below)
    if redis.call('get', K) ~= A.locker or takenAnew(A.locker) then
        removed(A.locker)
    end
end
local mark, upto = A.mark, A.upto
settle(upto) -- (which takes its entry out of the line, unless a later attempt made it)
local holder = redis.call('get', K)
local n = numberOf(holder, mark)
if n and upto ~= '' and n <= tonumber(upto) then
    return passed(2, holder, mark)
end
firstNow(mark) -- (it may have been first)
return {1}
