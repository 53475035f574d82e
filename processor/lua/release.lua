-- release.lua: let the key go if it still holds this locker — granted to the first process in
-- line that is alive, or free — and settle the acquisition, so that no request of it (or of an
-- older acquisition of its owner) that reaches Redis later can take the key. The same script
-- gives back an acquisition whose outcome is unknown (its reply was lost, or its caller gave
-- up): settled either way, and let go if it holds the key. (An attempt that waits in line is
-- never given back: its process waits with it, and settles it by leaving.)
-- Arguments: locker, seq, mark, last, fence_ttl, done_ttl, gap_every, gap_window, channel,
-- publish.
-- Returns {1, the locker the key was granted to or '', the first token of its block or 0, the
-- window left free in ms or 0, the server µs of the grant or 0} when let go, {-1, ''} when settled already (this release ran
-- before and its reply was lost), {0, ''} when the key is gone or holds another locker (an
-- operator's removal of it included).
counter() -- (first: a counter dlock never wrote stops the script before it writes)
local locker, seq = A.locker, A.seq
if redis.call('get', K) ~= locker then
    if settled(seq) and not forced(locker) then
        return {-1, ''}
    end
    settle(seq)
    return {0, ''}
end
unreserve(locker, A.last)
settle(seq)
return passed(1, locker, '')
