-- leave.lua: this process stops waiting: it leaves the line, and every acquisition it
-- numbered up to upto is settled: an attempt still on its way cannot put it back in line, nor
-- take the key, nor be granted it; one that holds the key already (a grant it no longer
-- wants, or a late copy of an attempt it gave up) is let go to the next in line at once. An
-- entry made since, by a later attempt, stays.
-- With unreleased (and unreleased_origin), the releases of the process that went unanswered
-- and are retried: settling them does not hide their holdings' loss (the end of the prelude).
-- Arguments: mark, upto, done_ttl, fence_ttl, gap_every, gap_window, channel, publish, and
-- unreleased, unreleased_origin.
-- Returns {2, the locker granted or '', its first token or 0, the window or 0, the server µs of
-- the grant or 0} when a key it held was passed on, else {1}.
counter() -- (first: a counter dlock never wrote stops the script before it writes)
local mark, upto = A.mark, A.upto
settle(upto) -- (which takes its entry out of the line, unless a later attempt made it)
local holder = redis.call('get', K)
local n = numberOf(holder, mark)
if n and upto ~= '' and n <= tonumber(upto) then
    return passed(2, holder, mark)
end
firstNow(mark) -- (it may have been first)
return {1}
