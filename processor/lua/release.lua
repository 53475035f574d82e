-- release.lua: let the key go if it still holds this locker — granted to the first process in
-- line that is alive, or free — and settle the acquisition, so that no request of it (or of an
-- older acquisition of its owner) that reaches Redis later can take the key. The same script
-- gives back an acquisition whose outcome is unknown (its reply was lost, or its caller gave
-- up): settled either way, and let go if it holds the key. (An attempt that waits in line is
-- never given back: its process waits with it, and settles it by leaving.)
-- With next, a release that grants the key to another process also puts this one back in
-- line, at its end, with next (a fresh acquisition of the same owner), as a yield does: a
-- goroutine of the process is expected to want the key again at once, and waits for its grant
-- without a request of its own. Only a release of the held key does so, and not with a next
-- that is settled or older than what the process waits with (mayStand): a late or repeated
-- copy finds the acquisition settled and changes nothing. A release that grants the key to
-- its own process (an attempt of it that asked while the release was on its way) does not
-- stand in line again.
-- Arguments: locker, seq, mark, last, fence_ttl, entry_ttl, done_ttl, gap_every, gap_window,
-- channel, publish, next, next_lease, next_tokens.
-- Returns {1, the locker the key was granted to or '', the first token of its block or 0, the
-- window left free in ms or 0, the server µs of the grant or 0} when let go, with three more
-- when it stood in line again with next: the key's life in ms (the grant's lease), the
-- process's place in line and 1 if it listens on its channel (else 0); {-1, ''} when settled already (this release ran
-- before and its reply was lost), {0, ''} when the key is gone or holds another locker (an
-- operator's removal of it included). A release that names its holding's origin and finds the
-- key gone, no release of it run, remembers the locker as removed (FORCED): Redis lost it, and
-- a copy of this release answers gone too.
counter() -- (first: a counter dlock never wrote stops the script before it writes)
local locker, seq = A.locker, A.seq
if redis.call('get', K) ~= locker then
    if settled(seq) and not forced(locker) then
        return {-1, ''}
    end
    if A.origin ~= '' then
        removed(locker) -- (a holding lost before any release of it ran: a copy of this release answers gone too)
    end
    settle(seq)
    return {0, ''}
end
if takenAnew(locker) then
    lostAnew(locker, seq)
    return {0, ''}
end
unreserve(locker, A.last)
local done, had = settle(seq)
local reply = passed(1, locker, '')
if A.next ~= '' and A.mark ~= '' and reply[2] ~= '' and not grantedOwn(reply) and mayStand(done, had) then
    return standAgain(reply)
end
return reply
