-- force.lua: an operator's last resort: let the key go if it still holds the locker the
-- operator saw (as State reports it), as a release does: granted to the first live process in
-- line, or free. The removed acquisition is settled, so that no late copy of its request can
-- take the key back, and named among the removed ones in {K}:forced:<owner>, so that its
-- holder's next renewal or release answers "gone" (its holder is not told here: it learns of
-- the loss then). A second copy of this request finds the locker gone and changes nothing, so
-- it can never remove a later holder's key; it answers that it removed the locker, from
-- KEYS[10], {K}:removed:<locker>, which keeps the removing request's name and whom the key
-- went to for as long as the locker's marks live (another request, another operator's or a
-- retry of the caller's, finds the locker gone). The keys of the owner (KEYS[4] to KEYS[6])
-- are the removed locker's.
-- Arguments: locker (the one to remove), seq, fence_ttl, done_ttl, gap_every, gap_window,
-- channel, publish, request.
-- Returns {1, the locker granted or '', its first token or 0, the window or 0, the server µs of
-- the grant or 0} when the key held the locker and was let go, {-1, the locker granted or ''}
-- when a copy of this request did, {0} otherwise.
counter() -- (first: a counter dlock never wrote stops the script before it writes)
local REMOVED = KEYS[10]
if redis.call('get', K) ~= A.locker then
    local by = redis.call('get', REMOVED) or ''
    if A.request ~= '' and string.sub(by, 1, #A.request + 1) == A.request .. '|' then
        return {-1, string.sub(by, #A.request + 2)} -- a copy of this request removed it (the grant's token is not kept)
    end
    return {0}
end
-- The marks must outlive the removed acquisition's copies by two of its leases, which the
-- operator does not know: its holder renews when a quarter of the lease is left, so eight times
-- the key's remaining life is at least that while it renews (the operator's own is the floor).
A.done_ttl = math.max(tonumber(A.done_ttl), 8 * redis.call('pttl', K))
settle(A.seq)
removed(A.locker, A.done_ttl)
local owner = ''
if A.seq ~= '' then
    owner = OWNER -- its holder learns of the loss at once
end
local reply = passed(1, A.locker, owner)
redis.call('set', REMOVED, A.request .. '|' .. reply[2], 'PX', A.done_ttl)
return reply
