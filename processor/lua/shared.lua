-- shared.lua: the one script of the read-write lock and the semaphore (processor.Shared*).
--
-- Both kinds are k permits: a semaphore's k is its permit count, a read-write lock's is RW_CAP
-- (a read-hold takes 1 permit, a write-hold all of them). A process keeps its permits as
-- holdings, each under a locker of its own (<owner><sequence number>) with its own lease, and
-- lends them to its own goroutines; processes that find too few permits free stand in one
-- line, first come first served.
--
-- Keys, all in the slot of the lock's unique key B:
--   KEYS[1] HELD  {B}:shared:held   hash: locker -> "<permits>|<fencing token>|<owner>"
--   KEYS[2] EXP   {B}:shared:exp    sorted set: locker by the server ms it expires unless renewed
--   KEYS[3] LINE  {B}:shared:line   sorted set: owner (a process) by the server µs it joined
--   KEYS[4] WANT  {B}:shared:want   hash: owner -> "<permits>|<server ms the entry expires>|<locker>"
--   KEYS[5] GONE  {B}:shared:gone   sorted set: settled lockers by the server ms they are kept until
--   KEYS[6] FENCE {B}:shared:fence  the fencing counter: the last token reserved
--   KEYS[7] KIND  {B}:shared:kind   "<rw|sem>|<k>": what the lock is and its permits
--   KEYS[8] HEARD {B}:shared:heard  hash: owner -> "<server ms it renewed its entry>|<1 if its process listened
--                                   on its channel then, else 0>|<lease ms>|<its WANT value then>": what
--                                   Redis heard of a waiting process. A version before it passes seven keys and
--                                   never reads it; the facts count only while WANT holds the value they were
--                                   written with (an entry without them, of that version, is counted until it
--                                   expires, as that version does).
--
-- Invariants (the explorer, internal/explore, checks them under late and repeated requests):
--   * the permits in HELD never exceed k (KIND's): a take is refused unless they fit (a downgrade,
--     which replaces a holding of its process by no more permits, takes none: a lowered k may
--     be below what is held, and a downgrade lowers what is held towards it);
--   * a settled locker (released, given back, failed without waiting, expired, replaced) never
--     holds again: every take of it answers -1 while GONE keeps it (gone_ttl, at least as long
--     as any copy of a request can be on its way); and a locker that holds is settled only by
--     what lets it go: a copy of its take answers its holding, whatever the count is now;
--   * a process in line is passed only by a request that fits with everything ahead of it in
--     line counted as taken (so a writer in line holds off readers that come after it), but
--     for the entries of processes that are not live (the mutex's rule, prelude.lua's live):
--     one that listened on its channel when it last renewed its entry and does not listen now
--     died (Redis drops a subscription as its connection closes), and its entry is dropped;
--     one that did not listen and has not renewed its entry within a third of its lease is
--     passed over while it stays so, and keeps its place.
--
-- Replies: {1, token, waiting} taken; {1, waiting, first token of a new block or 0} renewed;
-- {1} released (or forced); {-1} for a force a copy of which removed its locker; {-1, 1} for a release of a locker a downgrade replaced;
-- {0, rank, life, waiting[, heard]} not taken (rank: place in line, -1 when not in it; life:
-- ms until the first holding expires, -1 for none; heard, for a take that stands in line: 1
-- when Redis hears its process on its channel, else 0); {0} gone (a release of a locker an
-- operator forced, or of a holding Redis lost or ran out, or whose take was refused before it
-- was settled, answers it too, every copy: its holder is told of the loss); {-1} settled
-- already, or a stale take (older than its process's entry in line); {-2, kind} the lock is
-- another kind; {-3, k} more permits than k asked; {release's code, take's reply} for a
-- release that stands in line again (next).
-- waiting is 1 when another process stands in line whose permits do not fit, or more than k
-- permits are held (waiting): the holders lend no more and give back what comes free.
local A = {
    op = ARGV[1] or '',                -- take, renew, release, force, inspect, permits
    locker = ARGV[2] or '',            -- the request's locker (permits: the change's own, or '')
    owner = ARGV[3] or '',             -- its process (the locker's prefix)
    n = ARGV[4] or '',                 -- take: permits asked
    lease = ARGV[5] or '',             -- take, renew: the holding's lease, ms
    wait = ARGV[6] or '',              -- take: '1' to stand in line (or renew the entry) when the permits do not fit
    replaces = ARGV[7] or '',          -- take: a holding of the same owner that this one replaces when taken ('' for none)
    kind = ARGV[8] or '',              -- 'rw' or 'sem'
    k = ARGV[9] or '',                 -- permits of the kind: used when KIND is absent, or set by op permits
    entry_ttl = ARGV[10] or '',        -- how long a line entry lives unless renewed, ms
    gone_ttl = ARGV[11] or '',         -- how long a settled locker stays settled, ms
    fence_ttl = ARGV[12] or '',        -- how long the fencing counter is kept, ms
    channel = ARGV[13] or '',          -- the prefix of the process channels (<channel><owner>), '' to publish nothing
    publish = ARGV[14] or '',          -- 'publish' or 'spublish'
    tokens = ARGV[15] or '',           -- take: fencing tokens to reserve, the first being the holding's ('' for one);
                                       -- renew: a new block to reserve ('' or '0' for none)
    last = ARGV[16] or '',             -- release, or a take that replaces: the last token the holding let go
                                       -- handed out of its block ...
    block_end = ARGV[17] or '',        -- ... and the block's last ('' for none: nothing to give back)
    from = ARGV[18] or '',             -- permits: the count the change applies to ('' for whatever it is)
    origin = ARGV[19] or '',           -- renew, and a take that replaces: the token the holding (replaced) was taken with ('' if unknown)
    next = ARGV[20] or '',             -- release: the locker of the take that stands in line as it lets go ('' for none) ...
    next_n = ARGV[21] or '',           -- ... the permits it asks ...
    next_tokens = ARGV[22] or '',      -- ... and the fencing tokens it reserves
    listening = ARGV[23] or '',        -- take with wait, or next: '1' when the process counts itself heard on its channel (serve)
    request = ARGV[24] or '',          -- force: a fresh name of this request, the same in every copy of it
}
local HELD, EXP, LINE, WANT, GONE, FENCE, KIND, HEARD = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local clock = redis.call('time')
local NOW_US = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local NOW_MS = math.floor(NOW_US / 1000)

local function tell(owner, what)
    if A.channel ~= '' then
        pcall(redis.call, A.publish, A.channel .. owner, what)
    end
end

-- atLeast raises member's score in the sorted set key to until_ms, never lowering it: a copy
-- of a request that runs late or twice cannot cut short what a later one set.
local function atLeast(key, member, until_ms)
    if (tonumber(redis.call('zscore', key, member)) or 0) < until_ms then
        redis.call('zadd', key, until_ms, member)
    end
end

-- KEPT is GONE's member whose score is the latest that a copy of a take or renewal that ran
-- may still come (each one's run plus its gone_ttl, the longest of every process's): a holding
-- that runs out is settled until then at least, whoever's request finds it run out (prune) —
-- processes may give the lock type different leases, and with them different gone_ttls.
local KEPT = '|kept'

-- settle settles locker for gone_ttl, and until until_ms (if given) at least.
local function settle(locker, until_ms)
    atLeast(GONE, locker, math.max(NOW_MS + tonumber(A.gone_ttl), until_ms or 0))
    if redis.call('zscore', GONE, locker .. '|forced') then
        -- an operator removed it: its release answers gone for as long as it is settled
        atLeast(GONE, locker .. '|forced', tonumber(redis.call('zscore', GONE, locker)))
    end
end

-- unhold lets locker's holding go and settles the locker (until until_ms at least, if given).
local function unhold(locker, until_ms)
    redis.call('hdel', HELD, locker)
    redis.call('zrem', EXP, locker)
    settle(locker, until_ms)
end

local function settled(locker)
    return redis.call('zscore', GONE, locker) ~= false
end

-- refuse settles locker, whose take did not take (or whose attempt left the line unserved).
-- Every way a holding is let go settles its locker, so one not settled yet that its process
-- heard taken was lost by Redis since (an empty restart; a late copy of its take is refused
-- now): it is remembered as forced too, so that its release answers gone, not settled, and its
-- holder learns of the loss (a give-back of an attempt never heard taken answers gone too).
local function refuse(locker)
    if not settled(locker) then
        settle(locker .. '|forced')
    end
    settle(locker)
end

local function holding(locker)
    local v = redis.call('hget', HELD, locker)
    if not v then
        return nil
    end
    local n, token, owner = string.match(v, '^(%d+)|(%d+)|(.*)$')
    return {locker = locker, n = tonumber(n), token = token, owner = owner}
end

-- entry returns owner's line entry: the permits it waits for, when it expires, its locker and,
-- when a request of this version wrote it (HEARD holds facts written with this very value),
-- when it was renewed, whether its process listened on its channel then, and its lease.
local function entry(owner)
    local v = redis.call('hget', WANT, owner)
    if not v then
        return nil
    end
    local n, expires, locker = string.match(v, '^(%d+)|(%d+)|(.*)$')
    local e = {owner = owner, n = tonumber(n), expires = tonumber(expires), locker = locker}
    local h = HEARD and redis.call('hget', HEARD, owner)
    if h then
        local renewed, listened, lease, want = string.match(h, '^(%d+)|([01])|(%d+)|(.*)$')
        if want == v then
            e.renewed, e.listened, e.lease = tonumber(renewed), listened == '1', tonumber(lease)
        end
    end
    return e
end

-- older reports whether locker is an earlier attempt of A.owner than other: a process numbers
-- its lockers (<owner><sequence number>) in the order it makes them.
local function older(locker, other)
    local a = tonumber(string.sub(locker, #A.owner + 1))
    local b = tonumber(string.sub(other, #A.owner + 1))
    return a ~= nil and b ~= nil and a < b
end

local function drop(owner)
    redis.call('zrem', LINE, owner)
    redis.call('hdel', WANT, owner)
    if HEARD then
        redis.call('hdel', HEARD, owner)
    end
end

-- hears reports whether the process owner listens on its channel of the lock now, or nil when
-- Redis cannot tell (no channel, or a user not allowed to count subscribers).
local function hears(owner)
    if A.channel == '' then
        return nil
    end
    local count = 'numsub'
    if A.publish == 'spublish' then
        count = 'shardnumsub'
    end
    local r = redis.pcall('pubsub', count, A.channel .. owner)
    if type(r) ~= 'table' or r.err then -- (a user not allowed it: Redis cannot tell)
        return nil
    end
    return tonumber(r[2] or 0) > 0
end

-- died reports whether e's process died, as far as Redis can tell: it listened on its channel
-- when it last renewed its entry and does not now (Redis drops a subscription as soon as its
-- connection closes, which a process's death does).
local function died(e)
    return e.listened and hears(e.owner) == false
end

-- counts reports whether e counts in line (prune dropped the entries of processes that died):
-- its process listened when it renewed it (and listens still), or it renewed it within a third
-- of its lease (a process that does not listen asks every sixth), or it was written by a version
-- before the facts (counted until it expires, as that version counts it).
local function counts(e)
    return not e.renewed or e.listened or NOW_MS - e.renewed <= math.floor(e.lease / 3)
end

-- prune settles the holdings whose lease ran out and drops expired line entries, the entries of
-- processes that died (but the asking process's: it lives; an operator's force names another
-- process's locker) and settled lockers kept long enough. It reports whether permits came free
-- or the line moved (a holding ran out, or a dead process's entry went): the processes in line
-- that fit now are to be told.
local function prune()
    local dead = redis.call('zrangebyscore', EXP, '-inf', '(' .. NOW_MS)
    local kept = #dead > 0 and tonumber(redis.call('zscore', GONE, KEPT)) -- (read only when one ran out)
    for _, locker in ipairs(dead) do
        unhold(locker, kept)
        -- (its release answers gone, not settled: a holder that still counts its lease, Redis
        -- having run it out first — a failover that lost a renewal's write — is told the loss)
        settle(locker .. '|forced', kept)
    end
    redis.call('zremrangebyscore', GONE, '-inf', '(' .. NOW_MS)
    local moved = false
    for _, owner in ipairs(redis.call('zrange', LINE, 0, -1)) do
        local e = entry(owner)
        if not e or e.expires < NOW_MS then
            drop(owner)
        elseif (owner ~= A.owner or A.op == 'force') and died(e) then
            drop(owner)
            moved = true
        end
    end
    if HEARD and redis.call('zcard', LINE) == 0 and redis.call('exists', HEARD) == 1 then
        redis.call('del', HEARD) -- (facts of entries a version before them dropped, leaving HEARD alone)
    end
    return #dead > 0 or moved
end

-- used returns the permits held, leaving out the holding except (the one a take replaces).
local function used(except)
    local sum, owners = 0, {}
    local flat = redis.call('hgetall', HELD)
    for i = 1, #flat, 2 do
        local n, _, owner = string.match(flat[i + 1], '^(%d+)|(%d+)|(.*)$')
        if flat[i] ~= except then
            sum = sum + tonumber(n)
        end
        owners[owner] = true
    end
    return sum, owners
end

-- ahead returns the permits asked by the entries in line before owner's (all of them when
-- owner is not in line).
local function ahead(owner)
    local sum = 0
    for _, o in ipairs(redis.call('zrange', LINE, 0, -1)) do
        if o == owner then
            return sum
        end
        local e = entry(o)
        if e and counts(e) then
            sum = sum + e.n
        end
    end
    return sum
end

-- waiting reports (1) whether a process other than owner stands in line whose permits do not
-- fit (what is held, and what every entry ahead of it asks, counted as taken), or the permits
-- held exceed k (a lowered count): either way the holders lend no more and give back what comes
-- free, so that Redis hands out the permits again, in turn and within k. A process in line
-- whose permits fit takes them as it asks: the holders need not give anything back for it
-- (were they told to, processes that each keep a holding busy would give it back and take it
-- again for ever, each seeing the others in line for a moment).
local function waiting(owner, k)
    local sum = used()
    if sum > k then
        return 1
    end
    for _, o in ipairs(redis.call('zrange', LINE, 0, -1)) do
        local e = entry(o)
        if e and counts(e) then
            sum = sum + e.n
            if o ~= owner and sum > k then
                return 1
            end
        end
    end
    return 0
end

-- life returns the ms until the first holding expires, -1 for none.
local function life()
    local first = redis.call('zrange', EXP, 0, 0, 'withscores')
    if #first == 0 then
        return -1
    end
    return math.max(tonumber(first[2]) - NOW_MS, 0)
end

-- kind returns the lock's kind and k, the request's when none is recorded. A value that no
-- script writes (set by hand, or a key of that name that is not dlock's) stops every request,
-- before it writes, by name — as a corrupt counter does (checkCounter) — rather than be read
-- as a kind without a name or a semaphore of no permits.
local function kind()
    local v = redis.call('get', KIND)
    if not v then
        return A.kind, tonumber(A.k)
    end
    local kd, k = string.match(v, '^(%a+)|(%d+)$')
    if not kd or tonumber(k) < 1 then
        error('dlock: kind key ' .. KIND .. ' holds ' .. string.format('%q', string.sub(v, 1, 40)) ..
            ', not a lock kind and its permits (rw|<k> or sem|<k>, k at least 1)', 0)
    end
    return kd, tonumber(k)
end

-- wake tells the processes at the front of the line whose permits now fit, in order, up to
-- the first that does not: one message per process that may take. Entries that do not count
-- (counts) are passed over, as a take passes them.
local function wake(k)
    local sum = used('')
    for _, owner in ipairs(redis.call('zrange', LINE, 0, -1)) do
        local e = entry(owner)
        if e and counts(e) then
            if sum + e.n > k then
                return
            end
            sum = sum + e.n
            tell(owner, 'F')
        end
    end
end

-- keep makes every key live as long as what it holds is needed: the longest of the holdings'
-- leases, the line entries', the settled lockers' and the fencing counter's lives.
local function keep(k, kd)
    redis.call('set', KIND, kd .. '|' .. string.format('%.0f', k))
    local last = redis.call('zrange', EXP, -1, -1, 'withscores')
    local ms = math.max(tonumber(A.entry_ttl), tonumber(A.gone_ttl), tonumber(A.fence_ttl))
    if #last > 0 then
        ms = math.max(ms, tonumber(last[2]) - NOW_MS + 1)
    end
    local kept = tonumber(redis.call('zscore', GONE, KEPT))
    if kept then
        ms = math.max(ms, kept - NOW_MS) -- (what another process's longer mark life settles)
    end
    for _, key in ipairs({HELD, EXP, LINE, WANT, GONE, FENCE, KIND, HEARD}) do
        local left = redis.call('pttl', key)
        if left < ms and left ~= -2 then -- (-2: no such key)
            redis.call('pexpire', key, ms)
        end
    end
end

local function lengthen(locker)
    atLeast(EXP, locker, NOW_MS + tonumber(A.lease))
    atLeast(GONE, KEPT, NOW_MS + tonumber(A.gone_ttl))
end

-- checkCounter stops the script, before it writes anything, when the fencing counter holds
-- what no script of dlock's writes: as the prelude's of the mutex's scripts (prelude.lua).
local function checkCounter(key)
    local v = redis.call('get', key)
    if v and not (string.match(v, '^%d+$') and tonumber(v) < 9007198180999168) then
        error('dlock: fencing counter ' .. key .. ' holds ' .. string.format('%q', string.sub(v, 1, 40)) ..
            ', not a fencing token (a whole number below 2^53 - 2^30)', 0)
    end
end

-- roomFor stops the script, before it writes anything, when a block of n fencing tokens would
-- not fit below 2^53 - 2^30 (the counter was set near it by hand): a script never writes a
-- counter that the next one refuses (checkCounter).
local function roomFor(n)
    checkCounter(FENCE) -- (first: a counter that holds no number is refused by name)
    local v = tonumber(redis.call('get', FENCE) or '0')
    if math.max(v + 1, NOW_US) + math.max(tonumber(n) or 1, 1) - 1 >= 9007198180999168 then
        error('dlock: fencing counter ' .. FENCE .. ' holds ' .. string.format('%.0f', v) ..
            ': no room for ' .. n .. ' more tokens below 2^53 - 2^30 (set it lower or delete it)', 0)
    end
end

-- reserve reserves a block of n fencing tokens (at least one) and returns the first. The
-- counter keeps the last. Tokens run on the server clock in µs, above every token reserved
-- before; a release gives back what its holding did not hand out (when nobody reserved since),
-- so the counter runs ahead of the clock only as far as holdings use tokens.
local function reserve(n)
    local first = math.max(tonumber(redis.call('get', FENCE) or '0') + 1, NOW_US)
    redis.call('set', FENCE, string.format('%.0f', first + math.max(tonumber(n) or 1, 1) - 1))
    return first
end

-- giveBack lowers the counter to last as a holding whose first token is first lets go, when
-- the counter is still at the end of the holding's block (block_end): no holding reserved
-- tokens since, so those after last were never handed out.
local function giveBack(first)
    local fence = redis.call('get', FENCE)
    if A.block_end ~= '' and fence == A.block_end and tonumber(A.last) < tonumber(fence) and tonumber(A.last) >= tonumber(first) - 1 then
        redis.call('set', FENCE, A.last)
    end
end

local kd, k = kind()

-- serve runs A.op and returns its reply.
local function serve()
    if A.op ~= 'inspect' and kd ~= A.kind then
        return {-2, kd}
    end
    checkCounter(FENCE) -- (inspect too: State names such a counter rather than show it absent)
    if A.op == 'inspect' then
        -- a key of the lock's that holds another kind of value fails State as it fails every
        -- other request (the inspection reads EXP, LINE, FENCE and KIND itself; HGET and ZCARD,
        -- which the least-privilege user has, are O(1))
        redis.call('hget', HELD, '')
        redis.call('hget', WANT, '')
        redis.call('zcard', GONE)
        redis.call('hget', HEARD, '')
    end
    if A.op == 'take' or A.op == 'renew' and (tonumber(A.tokens) or 0) > 0 then -- (what reserves tokens)
        roomFor(A.tokens)
    end
    local freed = false
    if A.op ~= 'inspect' then
        -- (prune writes before anything is told: on a replica the script stops there, READONLY,
        -- having told nobody of a change it could not make)
        freed = prune()
    end

    if A.op == 'take' then
        local n = tonumber(A.n)
        local old = nil
        if A.replaces ~= '' then
            old = holding(A.replaces)
            if old and A.origin ~= '' and old.token ~= A.origin and old.owner == A.owner then
                -- taken anew under that locker (a late copy of its take after an empty restart
                -- wiped the holding): the process did not hold it in between; it is let go, as a
                -- renewal lets it go, and this take is settled as one whose holding is gone;
                -- remembered as forced, so that the holding's release answers gone
                settle(old.locker .. '|forced')
                unhold(old.locker)
                freed, old = true, nil
            end
        end
        -- a take that replaces a holding of its process by no more permits (a downgrade) takes
        -- none: it fits whatever the count, though a lowered one may be below what is held; one
        -- whose holding is gone is settled below, whatever the count
        local shrinks = old ~= nil and old.owner == A.owner and n <= old.n
        -- a copy of a take that was answered finds its holding below, whatever the count
        local mine = holding(A.locker)
        if n > k and not shrinks and not mine and (A.replaces == '' or old) then -- never fits: settled, and out of line (k may have been lowered while it waited)
            local e = entry(A.owner)
            if e and e.locker == A.locker then
                drop(A.owner)
                freed = true
            end
            refuse(A.locker)
            if freed then wake(k) end
            keep(k, kd)
            return {-3, string.format('%.0f', k)}
        end
        if settled(A.locker) then
            if freed then wake(k) end
            keep(k, kd)
            return {-1}
        end
        if mine then -- a copy of a take that was answered: the same holding, renewed
            lengthen(A.locker)
            if freed then wake(k) end
            keep(k, kd)
            return {1, mine.token, waiting(A.owner, k)}
        end
        -- A stale take is refused and settled: one that replaces a holding that is gone (a late
        -- copy, or it expired); one that replaces nothing, older than the attempt its process
        -- waits in line with (a copy of the take of an attempt the process gave up, whose
        -- give-back may not have run yet: as lock.lua refuses a copy older than its process's
        -- entry, it must not take the newer attempt's place, settling it, nor leave the old
        -- one in line for its give-back to take the process out of line).
        local stale
        if A.replaces ~= '' then
            stale = not old or old.owner ~= A.owner
        else
            local e = entry(A.owner)
            stale = e and e.locker ~= A.locker and older(A.locker, e.locker)
        end
        if stale then
            refuse(A.locker)
            if freed then wake(k) end
            keep(k, kd)
            return {-1}
        end
        local sum, owners = used(A.replaces)
        local fits = shrinks or sum + ahead(A.owner) + n <= k
        if fits then
            if old then
                giveBack(old.token)
            end
            local tok = string.format('%.0f', reserve(A.tokens))
            redis.call('hset', HELD, A.locker, A.n .. '|' .. tok .. '|' .. A.owner)
            lengthen(A.locker)
            local e = entry(A.owner)
            if e and e.locker == A.locker then
                drop(A.owner)
            end
            if old then
                unhold(old.locker)
                -- (its release answers so: settled by this take, not by a copy of that release)
                atLeast(GONE, old.locker .. '|replaced', tonumber(redis.call('zscore', GONE, old.locker)))
            end
            if freed or (old and old.n > n) then
                wake(k)
            end
            keep(k, kd)
            return {1, tok, waiting(A.owner, k)}
        end
        if A.wait ~= '1' then
            refuse(A.locker)
            if freed then wake(k) end
            keep(k, kd)
            return {0, -1, life(), waiting(A.owner, k)}
        end
        local e = entry(A.owner)
        if e and e.locker ~= A.locker then
            refuse(e.locker) -- the attempt this one takes the place of
        end
        local new = redis.call('zadd', LINE, 'NX', NOW_US, A.owner) == 1
        local want = A.n .. '|' .. (NOW_MS + tonumber(A.entry_ttl)) .. '|' .. A.locker
        redis.call('hset', WANT, A.owner, want)
        local heard = HEARD and hears(A.owner)
        if HEARD then
            -- (A process Redis does not hear, whose take says it counts itself heard or whose
            -- entry said it listened, may have died with the take on its way: its entry counts
            -- as renewed long ago, as the mutex's enqueue says, prelude.lua.)
            local renewed = NOW_MS
            if heard == false and (A.listening == '1' or (e and e.listened)) then
                renewed = 0
            end
            redis.call('hset', HEARD, A.owner, renewed .. '|' .. (heard and '1' or '0') .. '|' .. A.lease .. '|' .. want)
        end
        if new then
            for owner in pairs(owners) do
                if owner ~= A.owner then
                    tell(owner, 'W') -- someone waits: lend no more, give back what comes free
                end
            end
        end
        if freed then wake(k) end
        keep(k, kd)
        return {0, redis.call('zrank', LINE, A.owner), life(), waiting(A.owner, k), heard and 1 or 0}
    elseif A.op == 'renew' then
        local mine = holding(A.locker)
        if mine and A.origin ~= '' and mine.token ~= A.origin then
            -- taken anew under this locker (a late copy of its take after an empty restart wiped
            -- the holding): the holder did not hold it in between; it is lost, and let go —
            -- remembered as forced, so that the holder's release (or a copy of this renewal)
            -- answers gone, not settled, when this answer is lost
            settle(A.locker .. '|forced')
            unhold(A.locker)
            wake(k)
            keep(k, kd)
            return {0}
        end
        if mine then
            lengthen(A.locker)
            local first = 0
            if (tonumber(A.tokens) or 0) > 0 then
                first = string.format('%.0f', reserve(A.tokens))
            end
            if freed then wake(k) end
            keep(k, kd)
            return {1, waiting(A.owner, k), first}
        end
        if freed then -- (an expired holding was settled: its mark must live its time)
            wake(k)
            keep(k, kd)
        end
        if settled(A.locker) then
            return {-1}
        end
        return {0}
    elseif A.op == 'release' then
        -- lets the holding go, or takes the attempt out of line; settles the locker either way
        local was = settled(A.locker)
        local h = holding(A.locker)
        if h and A.origin ~= '' and h.token ~= A.origin then
            -- taken anew under this locker (a late copy of its take after an empty restart
            -- wiped the holding): its holder did not hold it in between; let go, and answered
            -- gone, as a renewal finds it — and so does a copy of this release, as after a
            -- force (the locker is marked below, as one neither held nor settled)
            unhold(A.locker)
            h, was, freed = nil, false, true
        end
        local e = entry(A.owner)
        if e and e.locker == A.locker then
            drop(A.owner)
            freed = true
        end
        if not h and not was then
            -- (a holding Redis lost before any release of it ran: a copy of this release, sent
            -- again after its reply was lost, answers gone too, as release.lua's does — also
            -- one that names no origin: Close lets go of a downgrade's locker whose answer was
            -- lost without it; a give-back of an attempt that never took answers gone as well)
            settle(A.locker .. '|forced')
        end
        settle(A.locker)
        if h then
            redis.call('hdel', HELD, A.locker)
            redis.call('zrem', EXP, A.locker)
            freed = true
            giveBack(h.token)
        end
        if freed then wake(k) end
        keep(k, kd)
        if h then
            return {1}
        elseif was and not settled(A.locker .. '|forced') then
            if settled(A.locker .. '|replaced') then
                return {-1, 1} -- (let go by a take that replaced it: a downgrade)
            end
            return {-1}
        end
        return {0}
    elseif A.op == 'force' then
        -- an operator lets another process's holding go (ForceRelease); nothing else is changed.
        -- The locker stays settled for at least eight times what was left of its lease, however
        -- short the operator's own lease: no copy of its process's requests takes it back.
        local left = tonumber(redis.call('zscore', EXP, A.locker) or '')
        if not left or not holding(A.locker) then
            if freed then -- (an expired holding was settled: its mark must live its time)
                wake(k)
                keep(k, kd)
            end
            if A.request ~= '' and settled(A.locker .. '|removed|' .. A.request) then
                return {-1} -- a copy of this request removed it
            end
            return {0}
        end
        A.gone_ttl = string.format('%.0f', math.max(tonumber(A.gone_ttl), 8 * (left - NOW_MS)))
        -- (and until KEPT at least, as a holding that runs out is settled: a copy of a take or
        -- renewal of its process may come as late as its own mark life, which the operator
        -- does not know)
        local kept = tonumber(redis.call('zscore', GONE, KEPT))
        settle(A.locker .. '|forced', kept) -- its release answers gone: its owners are told of the loss
        settle(A.locker .. '|removed|' .. A.request, kept)
        unhold(A.locker, kept)
        wake(k)
        keep(k, kd)
        return {1}
    elseif A.op == 'permits' then
        -- a change that names the count it changes applies to that count only: a late or repeated
        -- copy of it, or of an older change, finds the count changed since and changes nothing; a
        -- change with a locker of its own is settled as it runs, applied ('<locker>|set' settled
        -- too) or not, so that a copy of it that comes later still changes nothing, even when the
        -- count went back to the one it names (3 -> 5, 5 -> 3, then a copy of 3 -> 5), and answers
        -- as the first did
        if A.locker ~= '' and settled(A.locker) then
            if freed then wake(k) end
            keep(k, kd)
            if settled(A.locker .. '|set') then
                return {1}
            end
            return {0, string.format('%.0f', k)}
        end
        if A.from ~= '' and redis.call('exists', KIND) == 1 and tonumber(A.from) ~= k then
            if A.locker ~= '' then
                settle(A.locker)
            end
            if freed then wake(k) end -- (what the prune settled, as every request does)
            keep(k, kd)
            return {0, string.format('%.0f', k)}
        end
        if A.locker ~= '' then
            settle(A.locker)
            settle(A.locker .. '|set')
        end
        local was = k
        k = tonumber(A.k)
        local held, owners = used()
        if held > k or (k < was and waiting('', k) == 1) then
            for owner in pairs(owners) do
                -- more is held than the count now, or a process in line no longer fits: lend no
                -- more, give back what comes free
                tell(owner, 'W')
            end
        elseif k > was then
            for owner in pairs(owners) do
                tell(owner, 'F') -- room made: a holder's goroutine asking for more (not in line) asks now
            end
        end
        if k < was then
            -- a waiter asking for more than k now is refused as it next asks: it asks now, not a
            -- poll later (in line, it would hold up every entry behind it until then); a
            -- holder's goroutine may ask for more without standing in line
            for owner in pairs(owners) do
                tell(owner, 'F')
            end
            for _, owner in ipairs(redis.call('zrange', LINE, 0, -1)) do
                local e = entry(owner)
                if e and e.n > k and not owners[owner] then
                    tell(owner, 'F')
                end
            end
        end
        wake(k)
        keep(k, kd)
        return {1}
    elseif A.op == 'inspect' then
        local held = {}
        for _, locker in ipairs(redis.call('zrange', EXP, 0, -1, 'withscores')) do
            held[#held + 1] = locker
        end
        local line = {}
        for _, owner in ipairs(redis.call('zrange', LINE, 0, -1)) do
            local e = entry(owner)
            if e and e.expires >= NOW_MS and not died(e) and counts(e) then -- (the ones a release serves)
                line[#line + 1] = owner
                line[#line + 1] = e.n
            end
        end
        local out = {}
        for i = 1, #held, 2 do
            local h = holding(held[i])
            if h and tonumber(held[i + 1]) >= NOW_MS then
                out[#out + 1] = h.locker
                out[#out + 1] = h.n
                out[#out + 1] = h.token
                out[#out + 1] = math.max(tonumber(held[i + 1]) - NOW_MS, 0)
            end
        end
        local stored = redis.call('get', KIND) and 1 or 0
        return {kd, string.format('%.0f', k), out, line, redis.call('get', FENCE) or '0', stored}
    end
    return redis.error_reply('shared.lua: unknown op ' .. A.op)
end

-- A release that names next stands in line again as it lets go: its process's goroutines
-- still want permits that no holding of theirs serves (another process waits). Its take, with
-- wait, runs in the same script, right after the release, so that a process far from Redis
-- keeps its turn in line as a near one does (taking the permits at once if they fit). Each half
-- answers as it would alone, and a late or repeated copy of the pair is one of each.
if A.op == 'release' and A.next ~= '' then
    roomFor(A.next_tokens) -- (before the release writes: the take after it must not fail halfway)
    local let = serve()
    if let[1] == -2 then
        return let
    end
    A.op, A.locker, A.n, A.wait, A.replaces, A.tokens, A.last, A.block_end, A.origin = 'take', A.next, A.next_n, '1', '', A.next_tokens, '', '', ''
    return {let[1], serve()}
end
return serve()
