-- renew.lua: renew the lease if the key still holds this locker (the expander's renewal, an
-- Extend, or a renewal before a pass within this process), reserving a new block of fencing
-- tokens if asked. With yield, and another live process in line, give the key to it instead
-- (the hand-off limit is reached) and stand in line again at its end with the locker next:
-- this process still has goroutines that want the key (unless next is settled, or older than
-- the attempt the process waits with: a late copy's; mayStand). A window for processes not in line
-- that is due (gap_every) is opened the same way, though nobody stands in line: a process
-- whose goroutines never stop wanting the key lets it go at every window. A renewal only ever lengthens the
-- key's life, so copies of it that arrive late or twice cut nothing short. A yield check
-- marks its own number whatever it decides, so that a copy of one that found nobody in line
-- cannot give the key away later, while the tenure goes on: every renewal makes the mark live
-- as long as the key does (a copy can only act while the key holds its locker); a check its
-- process settled since (it left the line) is refused.
-- Arguments: locker, seq, lease, mark, tokens, last, yield, check, next, next_lease,
-- next_tokens, fence_ttl, entry_ttl, done_ttl, gap_every, gap_window, channel, publish, origin.
-- Returns {1, first token of the new block or 0} when renewed, {2, the locker granted, its
-- first token, 0, the server µs of the grant, the key's life in ms, the process's place in
-- line, 1 if it listens on its channel else 0} when yielded, {0, 0}
-- when the key no longer holds the locker, or holds it again in a holding the tenure did not
-- begin with (origin: then let go), {-1, 0} when this request came late or twice: the
-- locker was settled (let go already), or this very yield check ran before.
counter() -- (first: a counter dlock never wrote stops the script before it writes)
if tonumber(A.tokens) > 0 then
    exhausted(A.tokens)
end
local locker, seq, mark = A.locker, A.seq, A.mark
local yield = A.yield == '1' and A.check ~= ''
if yield then
    local checked = tonumber(redis.call('get', CHECK) or '-1')
    if tonumber(A.check) <= checked or settled(A.check) then
        return {-1, 0}
    end
    redis.call('set', CHECK, A.check, 'PX', math.max(tonumber(A.done_ttl), redis.call('pttl', CHECK)))
end
if redis.call('get', K) ~= locker then
    if settled(seq) and not forced(locker) then
        return {-1, 0}
    end
    return {0, 0}
end
if takenAnew(locker) then
    lostAnew(locker, seq)
    return {0, 0}
end
if yield then
    -- The yield passes over its own process: out of the line, to stand again at its end with
    -- next — but a process that waits with next already, or a newer attempt (this check is
    -- late: the process gave its tenure up and asked with next itself), keeps its place,
    -- whether or not the key is passed (a holder is never in line otherwise).
    local done, had = standing()
    local n = numberOf(A.next, OWNER)
    local skip = nil
    if had and n and had >= n then
        skip = mark
    else
        dequeue(mark)
    end
    if live(skip) or (A.gap_every ~= '' and not redis.call('get', GAP)) then -- (pass opens a window due)
        unreserve(locker, A.last)
        settle(seq)
        local reply = passed(2, locker, '', skip)
        if mayStand(done, had) then
            return standAgain(reply)
        end
        return reply
    end
end
lengthen(K, A.lease)
lengthen(CHECK, redis.call('pttl', K)) -- (the checks of the tenure's process hold back as long as it holds)
lengthen(FENCE, A.fence_ttl)
lengthen(FIRST, A.fence_ttl)
if tonumber(A.tokens) > 0 then
    return {1, tokens(A.tokens)}
end
return {1, 0}
