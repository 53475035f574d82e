-- lock.lua: an attempt to take the key — and, for a process that waits, its entry in the line
-- and its check that a grant did not go unheard. It takes the key if it is free (outside a
-- window left for processes not in line), or finds it granted to this very locker already
-- (a release granted it, or this attempt ran before and its reply was lost: the client sent
-- it again): the key then lives at least its lease from now, with a new block of tokens. When
-- the key is held by another, a waiting attempt (wait) stands in line with its locker, or
-- renews its entry, and stays open; any other attempt is settled. A process has one attempt or
-- tenure of a key at a time, so a request older than its owner's holder or entry is a stale
-- copy, refused (it must not put its process in line behind itself).
-- Arguments: locker, seq, lease, mark, wait, tokens, fence_ttl, entry_ttl, done_ttl, gap_every,
-- gap_window, channel, publish.
-- Returns {1, first token, the first token of the holding} when taken (they differ when the
-- key was granted to this locker, or taken by an earlier copy of this request: the holding
-- began with that grant's or copy's block); {0, life, holder, seen, rank, heard} when held by
-- another: the key's remaining life in milliseconds (-1 when it has no expiry), the value
-- under it, seen (below: the server clock in µs, or the fencing counter when it runs ahead
-- beneath the holding's block), and for a waiting
-- attempt its process's place in line (0 for first; -1 when not in line) and 1 if the process
-- listens on its channel of the key (else 0); {-1, 0} when this acquisition was settled
-- already, or is stale.
exhausted(A.tokens) -- (first: a counter dlock never wrote, or one with no room left for this
-- take's block, stops the script before it writes)
local locker, seq, mark = A.locker, A.seq, A.mark

-- refuse settles this attempt, refused, and remembers its locker as removed (FORCED). Every way
-- a holding is let go settles its locker, so the refusal is the first to settle it (a settled
-- one is answered above); yet an earlier copy of this request may have taken the key (its reply
-- lost) before Redis lost that holding (an empty restart, a failover), and the holder's release
-- would find the acquisition settled and answer settled, which reads as let go. Marked, it
-- answers gone. (A give-back of an attempt never heard taken answers gone too; its process
-- ignores that. Each refusal takes a place in FORCED as a removal does: see FORCED_KEPT.) A
-- stale copy of the take of the very acquisition that holds the key (holder: its process has
-- given it up, and waits with a newer attempt) is settled but not marked: Redis holds it, and
-- its release, which may be on its way already, lets it go: a copy of that release must
-- answer settled, not gone. (One the late copy took anew is told by its origin while the key
-- holds it, takenAnew, and after it ran out by the prelude: a process waits with a newer
-- attempt beside its holding only once that holding's release went unanswered, and every
-- request of it names that release then, A.unreleased.)
local function refuse(holder)
    if seq ~= '' and holder ~= locker then
        removed(locker)
    end
    settle(seq)
end

if settled(seq) then
    lengthen(DONE, A.done_ttl) -- a copy came: others may follow; the mark outlives the last by its life
    return {-1, 0}
end
local holder = redis.call('get', K)
local owner = string.sub(locker, 1, #locker - #seq)
local waits = mark ~= '' and waiting(mark)
-- (also a copy of the take of the very acquisition that holds the key, whose process has
-- given it up and waits with a newer attempt: its give-back lets the key go)
local own = seq ~= '' and math.max(numberOf(holder, owner) or -1, waits and numberOf(waits, owner) or -1)
if own and own > tonumber(seq) then
    refuse(holder)
    return {-1, 0}
end
if holder == locker then
    lengthen(K, A.lease)
    if origin(locker) ~= '' then
        lengthen(FIRST, redis.call('pttl', K)) -- (the holding's origin lives as long as the key: its tenure's restart check needs it)
    end
    lengthen(CHECK, redis.call('pttl', K)) -- (as a renewal does)
    if mark ~= '' then
        dequeue(mark)
    end
    local first = tokens(A.tokens)
    return {1, first, origin(locker)}
end
if not holder and not gapOpen() then
    redis.call('set', K, locker, 'PX', A.lease)
    if mark ~= '' then
        dequeue(mark)
    end
    local first = tokens(A.tokens, locker)
    return {1, first, first}
end
local rank, heard = -1, 0
if A.wait == '1' and mark ~= '' then
    if enqueue(mark, locker, A.lease, A.tokens) then
        heard = 1
    end
    local r = redis.pcall('zrank', LINE, mark) -- (a user not allowed it: the place is unknown)
    if type(r) == 'number' then
        rank = r
    end
else
    refuse(holder)
end
local life = redis.call('pttl', K)
if not holder then
    holder, life = '', tonumber(redis.call('get', GAP)) - NOW_MS -- the window left free
end
-- Every grant made before this request carried a token at or below seen; every grant after
-- it, a token above: the process tells a grant it hears from one that came and went unheard.
-- seen is the clock, or the counter when it runs ahead — but no higher than the holding's
-- first token less one: a release lowers the counter to that at most (unreserve), and a grant
-- after it reserves from there.
local seen = counter()
local first = string.match(redis.call('get', FIRST) or '', '^(%d+)|')
if first then
    seen = math.min(seen, tonumber(first) - 1)
end
seen = math.max(seen, NOW_US)
return {0, life, holder, string.format('%.0f', seen), rank, heard}
