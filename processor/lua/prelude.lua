-- prelude.lua: what every script of this directory shares; it is put in front of each one.
--
-- Every script takes the same nine keys (force.lua a tenth: see there), which share the lock
-- key's Redis Cluster slot:
--   KEYS[1]  K, the lock key DLOCK_<type>_<target>: the locker of the acquisition that holds it
--            (<owner><sequence number>); absent when free
--   KEYS[2]  {K}:fence, the fencing counter: the largest token handed out or reserved
--   KEYS[3]  {K}:line, the waiting line: a sorted set of processes (their marks) by arrival
--   KEYS[4]  {K}:done:<owner>, the owner's settled mark: no request of an acquisition of that
--            owner numbered at or below it can take the key, be granted it or put the owner in
--            line (released, given back, failed, removed by an operator, or left)
--   KEYS[5]  {K}:check:<owner>, the owner's checked mark: the largest yield check number that
--            ran (a mark of its own, so that it does not settle the tenure's locker)
--   KEYS[6]  {K}:forced:<owner>, the owner's lockers removed last (forced): by an operator
--            (ForceRelease), or found lost by Redis (the key taken anew after an empty
--            restart, or gone before any release of it ran: release.lua, and the end of this
--            prelude for a retried release); their releases and renewals answer "gone", so
--            that their holders learn of the loss
--   KEYS[7]  {K}:want, what each process in line waits with: mark -> "<locker>|<lease ms>|
--            <tokens>|<server ms it last renewed its entry>|<server ms it expires unless
--            renewed>|<1 if it listened on its channel then, else 0>"; a release grants the
--            key to it. An entry outlives its process by at most its time to live.
--   KEYS[8]  {K}:gap, while set, a window in which the key is left free for processes that
--            do not stand in line (Java DLock): its value is when the window ends (server ms),
--            its life the period between windows
--   KEYS[9]  {K}:first, "<first token>|<locker>": the first token of the block reserved when
--            the key's current holding began (a take or a grant), which a release of it may
--            lower the counter to and no further
--
-- Every script takes the same arguments, in the order A names them (processor.args writes them
-- in that order, '' for what a request does not carry, and leaves out the empty ones at the
-- end: the ones few requests carry come last); A holds them by name.
--
-- Return codes mean the same in every script: 1 taken/renewed/released, 0 held by another or
-- gone, -1 settled already (a late or repeated copy), 2 yielded to the next in line.
local A = {
    locker = ARGV[1] or '',         -- the request's locker, <owner><sequence number>
    seq = ARGV[2] or '',            -- its sequence number ('' for a locker of another form)
    lease = ARGV[3] or '',          -- its lease, ms
    mark = ARGV[4] or '',           -- this process's name in the line ('' for none: it never waits in line)
    wait = ARGV[5] or '',           -- '1': stand in line (or renew the entry) when the key is held
    listening = ARGV[6] or '',      -- with wait or next: '1' when the process counts itself heard on its channel (enqueue)
    tokens = ARGV[7] or '',         -- fencing tokens to reserve ('0' for none)
    last = ARGV[8] or '',           -- the last fencing token the holder handed out ('' if unknown)
    fence_ttl = ARGV[9] or '',      -- how long the fencing counter is kept, ms
    entry_ttl = ARGV[10] or '',     -- how long a line entry lives unless renewed, ms
    done_ttl = ARGV[11] or '',      -- how long a settled mark lasts, ms
    channel = ARGV[12] or '',       -- the release channels' prefix: a process hears on <channel>:<mark> ('' to publish nothing)
    publish = ARGV[13] or '',       -- the command that publishes: 'publish', or 'spublish' for sharded channels
    gap_every = ARGV[14] or '',     -- the period between windows left free for processes not in line ('': none), ms
    gap_window = ARGV[15] or '',    -- each window's length, ms
    yield = ARGV[16] or '',         -- '1': give the key to the first live process in line, if there is one
    check = ARGV[17] or '',         -- with yield: a fresh number of the owner that this check marks
    next = ARGV[18] or '',          -- with yield: the locker the process waits with next, its lease and tokens
    next_lease = ARGV[19] or '',
    next_tokens = ARGV[20] or '',
    upto = ARGV[21] or '',          -- leave: the newest number the process gave a locker
    max_listed = ARGV[22] or '',    -- inspect: how many entries of the line to list at most
    origin = ARGV[23] or '',        -- renew: the first token of the holding the tenure began with ('' if unknown)
    unreleased = ARGV[24] or '',    -- lockers of the owner that held the key and whose releases are unanswered (retried), oldest first, separated by spaces: see the end
    unreleased_origin = ARGV[25] or '', -- the first token of each one's holding, in the same order ('0' or none if unknown)
    request = ARGV[26] or '',       -- force: a fresh name of this request (no '|'), the same in every copy of it
}

-- MAX_LEASE_MS and MAX_TOKENS bound what a line entry may ask for (domain.MaxLease, and
-- processor.MaxTokens, beyond which the processor sends no request): an entry beyond them (or
-- with a lease under a millisecond), which no script of dlock's writes, counts as expired
-- (entry), so that no grant fails halfway on it.
local MAX_LEASE_MS, MAX_TOKENS = 604800000, 1073741824

-- OWNER is the owner of the request's locker (the process it comes from), or its mark.
local OWNER = A.mark
if A.seq ~= '' then
    OWNER = string.sub(A.locker, 1, #A.locker - #A.seq)
end

local K, FENCE, LINE, DONE, CHECK, FORCED, WANT, GAP, FIRST =
    KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local clock = redis.call('time')
local NOW_US = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local NOW_MS = math.floor(NOW_US / 1000)

-- lengthen makes key live at least ms from now: never shorter than it does already, so that a
-- copy of a request that arrives late or twice cannot cut short what a later one set.
local function lengthen(key, ms)
    if redis.call('pttl', key) < tonumber(ms) then
        redis.call('pexpire', key, ms)
    end
end

-- settled reports whether acquisition seq of the owner of DONE was settled.
local function settled(seq)
    return seq ~= '' and tonumber(seq) <= tonumber(redis.call('get', DONE) or '-1')
end



-- numberOf returns the sequence number of locker if it is one of owner's (owner followed by
-- decimal digits), else nil.
local function numberOf(locker, owner)
    if owner == '' or not locker or string.sub(locker, 1, #owner) ~= owner then
        return nil
    end
    local rest = string.sub(locker, #owner + 1)
    if not string.find(rest, '^%d+$') then
        return nil
    end
    return tonumber(rest)
end

-- FORCED_KEPT is how many of the owner's removed lockers FORCED remembers (the newest):
-- besides the holding its process releases, only the releases it retries can be unanswered.
-- Those may wait, between tries, while newer holdings of its process are removed, any
-- number of them; but each of those began with a request of the process, which names every
-- retried one (A.unreleased), and the end of this prelude makes them the newest again then.
-- Every removal of a newer holding takes a place too, and so does every attempt refused
-- (lock.lua's refuse: a process sends none while its tenure's release is on its way the first
-- time, and names every retried one in each), so FORCED_KEPT - 1 retried releases
-- are kept past it. (A process retrying FORCED_KEPT releases of one key at once, all of them
-- found removed, loses the oldest to one removal of a newer holding: it answers settled; more
-- than FORCED_KEPT keep only the newest FORCED_KEPT even without one.)
local FORCED_KEPT = 4

-- forced reports whether locker is one of the owner's removed ones FORCED remembers (its
-- lockers separated by spaces, oldest first: a locker of dlock's has none).
local function forced(locker)
    local v = redis.call('get', FORCED)
    if not v then
        return false
    end
    if v == locker then
        return true
    end
    for l in string.gmatch(v, '%S+') do
        if l == locker then
            return true
        end
    end
    return false
end

-- counter returns the fencing counter (0 when absent), read once per script. Each script that
-- may write reads it first, so that it stops before it writes anything when the counter holds
-- what no script of dlock's writes: not a whole number below 2^53 - 2^30 (the numbers a Lua
-- number holds exactly, less room for a block of MAX_TOKENS, so that no block a script
-- reserves reaches 2^53), e.g. a value set by hand. With the counter unknown a token could
-- repeat one handed out before, so the lock refuses rather than guess. Its error names the
-- key, and processor.Refused knows it: a refusal that no retry mends, as a key of another kind
-- is (WRONGTYPE), until the counter is deleted or set right. (A plain string: Redis 7 would
-- pass a table's err as the reply, but Redis 6 and miniredis would not.)
local FENCE_BOUND = 9007198180999168 -- 2^53 - 2^30
local fence
local function counter()
    if not fence then
        local v = redis.call('get', FENCE)
        if v and not (string.match(v, '^%d+$') and tonumber(v) < FENCE_BOUND) then
            error('dlock: fencing counter ' .. FENCE .. ' holds ' .. string.format('%q', string.sub(v, 1, 40)) ..
                ', not a fencing token (a whole number below 2^53 - 2^30)', 0)
        end
        fence = tonumber(v or '0')
    end
    return fence
end

-- room reports whether a block of n tokens fits below FENCE_BOUND; a script that would reserve
-- one that does not fit stops (exhausted) before it writes, or a release leaves the key free
-- rather than grant it (pass), so that no script writes a counter that the next one refuses.
local function room(n)
    return math.max(counter() + 1, NOW_US) + math.max(tonumber(n) or 1, 1) - 1 < FENCE_BOUND
end

local function exhausted(n)
    if not room(n) then
        error('dlock: fencing counter ' .. FENCE .. ' holds ' .. string.format('%.0f', counter()) ..
            ': no room for ' .. n .. ' more tokens below 2^53 - 2^30 (set it lower or delete it)', 0)
    end
end

-- tokens reserves n fencing tokens and returns the first: max(counter + 1, server clock in
-- microseconds). The counter then holds the last of them. Tokens keep increasing when the
-- counter expires or Redis restarts empty, as long as the server clock does not go back (by
-- more than the counter runs ahead of it: unreserve keeps that to what holders used). holder,
-- when given, is the locker whose holding of the key begins with this block (FIRST).
local function tokens(n, holder)
    local first = math.max(counter() + 1, NOW_US)
    fence = first + math.max(tonumber(n), 1) - 1
    local keep = math.max(tonumber(A.fence_ttl), redis.call('pttl', FENCE))
    redis.call('set', FENCE, string.format('%.0f', fence), 'PX', keep)
    if holder then
        redis.call('set', FIRST, string.format('%.0f', first) .. '|' .. holder, 'PX', keep)
    end
    return first
end

-- unreserve lowers the counter to last, the last token the key's holder locker handed out,
-- as it lets the key go with tokens unused: the next holder's tokens follow on from the last
-- one used, so the counter runs ahead of the clock only as far as holders use tokens. It
-- never goes below the first token of the holding (FIRST): a holder's last may be stale (a
-- copy of its request took the key again after an empty restart, or after its settled mark
-- expired, and reserved a new block it does not know of), and tokens below that block were
-- handed out by others. Without last (a give-back: it is not known) or FIRST for locker it
-- leaves the counter alone.
local function unreserve(locker, last)
    if last == '' or counter() <= tonumber(last) then
        return -- (every token reserved was used: the holding's first token is not needed)
    end
    local f = redis.call('get', FIRST)
    local first, who = string.match(f or '', '^(%d+)|(.*)$')
    if who ~= locker then
        return
    end
    local floor = math.max(tonumber(last), tonumber(first) - 1)
    if counter() <= floor then
        return
    end
    local keep = redis.call('pttl', FENCE)
    if keep > 0 then
        fence = floor
        redis.call('set', FENCE, string.format('%.0f', floor), 'PX', keep)
    end
end

-- origin returns the first token of the holding of the key, as a number, when FIRST names
-- locker as its holder; else ''.
local function origin(locker)
    local first, who = string.match(redis.call('get', FIRST) or '', '^(%d+)|(.*)$')
    if who ~= locker then
        return ''
    end
    return tonumber(first)
end

-- takenAnew reports whether the key's holding of locker is not the one its tenure began with
-- (began, the first token it was taken with; A.origin unless given): FIRST names locker with
-- another first token, so a late copy of the tenure's take (or a grant to the entry such a
-- copy made) took it anew after Redis lost it. Without began, or FIRST for locker, it cannot
-- tell: false.
local function takenAnew(locker, began)
    began = began or A.origin
    local now = began ~= '' and origin(locker) or ''
    return now ~= '' and now ~= tonumber(began)
end

-- removed remembers locker among the owner's removed ones (FORCED), the newest FORCED_KEPT,
-- for ttl ms (as long as the owner's settled mark lives, a mark's life at least, unless
-- given) and no less than it lives already: its release and renewals answer gone. Another
-- one remembered still answers gone too: an operator may have removed the holding whose
-- release is on its way when an older one is found lost (the end of this prelude).
local function removed(locker, ttl)
    ttl = math.max(ttl or math.max(tonumber(A.done_ttl), redis.call('pttl', DONE)), redis.call('pttl', FORCED))
    local kept = {}
    for l in string.gmatch(redis.call('get', FORCED) or '', '%S+') do
        if l ~= locker then
            kept[#kept + 1] = l
        end
    end
    kept[#kept + 1] = locker
    redis.call('set', FORCED, table.concat(kept, ' ', math.max(#kept - FORCED_KEPT + 1, 1)), 'PX', ttl)
end

-- dequeue takes mark out of the line.
local function dequeue(mark)
    redis.call('zrem', LINE, mark)
    redis.call('hdel', WANT, mark)
end

-- hears reports whether the process named m listens on its channel of the key: it is alive
-- and hears a grant at once (Redis drops a subscription as its connection closes, which a
-- process's death does). It returns nil when Redis cannot tell (no channel, or a user not
-- allowed PUBSUB NUMSUB), which counts as not heard.
local function hears(m)
    if A.channel == '' then
        return nil
    end
    local count = 'numsub'
    if A.publish == 'spublish' then
        count = 'shardnumsub'
    end
    local r = redis.pcall('pubsub', count, A.channel .. ':' .. m)
    if type(r) ~= 'table' or r.err then -- (a user not allowed it: Redis cannot tell)
        return nil
    end
    return tonumber(r[2] or 0) > 0
end

-- entry returns mark's entry: the locker it waits with, its lease, tokens, when it renewed the
-- entry, when the entry expires unless renewed again (server ms), and whether its process
-- listened on its channel then; nil when it has none. (An entry of a version before the
-- flag, without it, did not listen. That version reads this one's entries as expired — their
-- last field is the flag — and drops them: during a rolling upgrade each side may lose its
-- place in line to the other's release, and stands in line again at its next ask; no grant
-- ever goes to a misread locker.)
local function entry(mark)
    local w = redis.call('hget', WANT, mark)
    if not w then
        return nil
    end
    local at = string.find(w, '|%d+|%d+|%d+|%d+|[01]$')
    local locker, lease, n, renewed, expires, listens
    if at then
        locker = string.sub(w, 1, at - 1)
        lease, n, renewed, expires, listens = string.match(w, '^|(%d+)|(%d+)|(%d+)|(%d+)|([01])$', at)
    else
        locker, lease, n, renewed, expires = string.match(w, '^(.*)|(%d+)|(%d+)|(%d+)|(%d+)$')
    end
    local ms, k = tonumber(lease), tonumber(n)
    renewed, expires = tonumber(renewed), tonumber(expires)
    if not (ms and k and renewed and expires) or ms < 1 or ms > MAX_LEASE_MS or k > MAX_TOKENS then
        return nil -- (no script of dlock's wrote it: it counts as expired, see MAX_TOKENS)
    end
    return locker, lease, n, renewed, expires, listens == '1'
end

-- waiting returns what mark waits with, as entry does, when its entry is alive; else nil.
local function waiting(mark)
    local locker, lease, n, renewed, expires, listened = entry(mark)
    if not expires or expires <= NOW_MS then
        return nil
    end
    return locker, lease, n, renewed, expires, listened
end

-- enqueue puts mark at the end of the line, or renews its entry where it stands, waiting with
-- locker (its lease and tokens): the acquisition a release grants the key to. The entry notes
-- whether the process listens on its channel now; enqueue returns that.
--
-- A request of a process that Redis does not hear renews the entry as of long ago (0), so that
-- no grant goes to it (isLive), when the request says the process counts itself heard
-- (A.listening: its subscription confirmed, and no answer since said otherwise) or the entry
-- said it listened: the process may have died with the request on its way, Redis dropping its
-- subscription first — and every copy of the request (a client's retry), and a relocking
-- release or yield check on its way, says so as the first did. A live process is told that
-- Redis does not hear it (the reply), and its next ask, which says so, counts from its send:
-- it is judged as one without notifications (a subscription Redis drops, or one Redis does not
-- count: plain pub/sub on a Cluster after a failover). When Redis cannot tell (hears: nil),
-- every entry is judged so.
local function enqueue(mark, locker, lease, n)
    local heard = hears(mark)
    local listens, renewed = '0', NOW_MS
    if heard then
        listens = '1'
    elseif heard == false and (A.listening == '1' or select(6, waiting(mark))) then
        renewed = 0
    end
    redis.call('zadd', LINE, 'NX', NOW_US, mark)
    redis.call('hset', WANT, mark, locker .. '|' .. lease .. '|' .. n .. '|' .. renewed .. '|' .. (NOW_MS + tonumber(A.entry_ttl)) .. '|' .. listens)
    lengthen(LINE, A.entry_ttl)
    lengthen(WANT, A.entry_ttl)
    return heard
end

-- standAgain puts the request's process (A.mark) back at the end of the line with A.next, its
-- lease and tokens, after a script that let the key go granted it to another process (a yield,
-- a release of a process that takes the key again at once), when mayStand allows: reply, the
-- script's, then also carries the key's life (ms: the grant's lease, when its holder would let
-- it expire), the process's place in line and 1 if it listens on its channel (else 0).
local function standAgain(reply)
    local heard = enqueue(A.mark, A.next, A.next_lease, A.next_tokens)
    local rank = redis.pcall('zrank', LINE, A.mark) -- (a user not allowed it: the place is unknown)
    reply[6] = redis.call('pttl', K)
    reply[7] = type(rank) == 'number' and rank or -1
    reply[8] = heard and 1 or 0
    return reply
end

-- isLive reports whether the process named m, whose entry is alive and says it was renewed at
-- renewed with lease and whether the process listened then (as waiting returns them), is alive
-- as far as Redis can tell: one that listened on its channel when it last renewed its entry
-- must listen now (Redis drops a subscription as soon as its connection closes: a process
-- killed is skipped at once), however old its entry; one that did not (no notifications) must
-- have renewed its entry within a third of its lease. It changes nothing.
local function isLive(m, lease, renewed, listened)
    if listened then
        return hears(m)
    end
    return NOW_MS - renewed <= math.floor(tonumber(lease) / 3)
end

-- live returns the first process in line that is live (isLive) and what it waits with,
-- passing over the process named skip (nil for none). On the way it drops the entries whose
-- time ran out (their processes stopped renewing them). Entries that are alive but not live
-- stay in their place.
local function live(skip)
    local marks = redis.call('zrange', LINE, 0, 15)
    for i, m in ipairs(marks) do
        local locker, lease, n, renewed, _, listened = waiting(m)
        if not locker then
            dequeue(m)
        elseif m ~= skip and isLive(m, lease, renewed, listened) then
            return m, locker, lease, n, marks, i
        end
    end
    return nil
end

-- own returns the number of the acquisition the request's owner (OWNER) waits with in line
-- (math.huge for a locker of another form, which no acquisition of the owner's replaces) and
-- when its entry expires; nil when it has no entry.
local function own()
    local locker, _, _, _, expires = entry(OWNER)
    if not expires then
        return nil
    end
    return numberOf(locker, OWNER) or math.huge, expires
end

-- settle raises the settled mark of the request's owner (OWNER) to seq — the mark only
-- rises, and each settle makes it live at least a mark's life more — and takes the owner's
-- entry out of the line if it waits with an acquisition that is settled now (or its time ran
-- out): no entry in the line ever waits with a settled acquisition, so a grant never goes to
-- one. It returns what standing does, after it (nothing for a locker of another form).
local function settle(seq)
    if seq == '' then
        return nil
    end
    local done = tonumber(redis.call('get', DONE) or '-1')
    if tonumber(seq) > done then
        done = tonumber(seq)
        redis.call('set', DONE, seq, 'PX', math.max(tonumber(A.done_ttl), redis.call('pttl', DONE)))
    else
        lengthen(DONE, A.done_ttl)
    end
    local n, expires = own()
    if expires and (expires <= NOW_MS or n <= tonumber(seq)) then
        dequeue(OWNER)
        return done, nil
    end
    return done, n
end

-- standing returns the settled mark of the request's owner (OWNER) and the number of the
-- acquisition its process waits with in line (as own; nil for none or an expired entry).
local function standing()
    local done = tonumber(redis.call('get', DONE) or '-1')
    local n, expires = own()
    if not expires or expires <= NOW_MS then
        return done, nil
    end
    return done, n
end

-- mayStand reports whether the request's process may stand in line again with A.next, given
-- what standing returns (done, had): next is its owner's, not settled, and the process waits
-- with no newer acquisition — a request whose next is older is a late copy, which must not
-- put its process back in line behind itself (lock.lua refuses one so). An empty restart may
-- erase the marks a late copy's other checks read; these it reads as they stand now.
local function mayStand(done, had)
    local n = numberOf(A.next, OWNER)
    return n ~= nil and done ~= nil and n > done and (had == nil or had <= n)
end

-- grantedOwn reports whether reply, a script's that let the key go, granted it to the
-- request's own process (an entry of it in line).
local function grantedOwn(reply)
    return numberOf(reply[2], OWNER) ~= nil
end

-- tell publishes message to each process named in marks once: every process hears the key's
-- messages on a channel of its own (channel .. ':' .. its mark), so that a grant wakes only
-- the process it goes to. (A user not allowed to publish there, as under an older version's
-- ACL, tells nobody: the processes learn by asking.) It runs only after the change it tells
-- was written: on a replica the write fails first, READONLY, and nobody is told.
local function tell(message, marks)
    if A.channel == '' then
        return
    end
    local told = {}
    for _, m in ipairs(marks) do
        if m ~= '' and not told[m] then
            told[m] = true
            redis.pcall(A.publish, A.channel .. ':' .. m, message)
        end
    end
end

-- inLine returns the processes in line, then also.
local function inLine(also)
    local marks = redis.call('zrange', LINE, 0, -1)
    marks[#marks + 1] = also
    return marks
end

-- gapOpen reports whether the key is inside a window left free for processes not in line.
local function gapOpen()
    local ends = redis.call('get', GAP)
    return ends and tonumber(ends) > NOW_MS
end

-- firstNow tells the first process in line that listens on its channel (of the first 16, as
-- live looks at) that it is first now — a dead one before it is passed over at the next
-- release: 'F|life=<ms>|<from>', where life is how long the key has to live (0 when free, -1
-- when it never expires): a fresh sighting of the holder. It then keeps the pace of the first
-- (it asks again once the key may have expired, at once if free, and half its lease after the
-- message at the latest); a process further back asks seldom. After a grant, marks and start
-- are where live stopped (the entries before it do not listen), and held is the lease the key
-- was granted with (ms): the first is not told when its pace further back is as quick as the
-- first's — its entry lives no longer than its lease (a lease of 2 s or more: it asks every
-- third of its lease) — and the new holding lives more than a third of its lease (it has
-- asked again, and learnt its place, before that holding could expire unrenewed).
local function firstNow(from, marks, start, held)
    marks = marks or redis.call('zrange', LINE, 0, 15)
    for i = start or 1, #marks do
        local m = marks[i]
        local locker, lease, _, renewed, expires, listened = waiting(m)
        if locker and listened and hears(m) then
            lease = tonumber(lease)
            if not (held and expires - renewed <= lease and 3 * tonumber(held) > lease) then
                local life = tonumber(held) or redis.call('pttl', K)
                if life == -2 then -- (no key)
                    life = 0
                end
                tell('F|life=' .. string.format('%.0f', life) .. '|' .. from, {m})
            end
            return
        end
    end
end

-- pass lets the key go after its holder (from) gave it up: granted to the first process in line
-- that is live (one that may have died is passed over, and so is the process named skip),
-- which then holds it with the locker it waits with, its lease and a block of fencing tokens,
-- without a further request:
-- 'G|at=<µs>|<from>|<locker>|<first token>' tells it, where at is this server's clock as it
-- ran the grant: the process counts the lease from its last request that showed it waiting
-- plus the time from that request's run (no later than the clock or counter its answer
-- carried) to at, less the drift allowance. The entries before it stay. When nobody can be
-- granted it, or a window for processes not in line is due (gap_every), the key is left free:
-- 'R|<from>|<window ms>' tells every process in line. The process of from (its mark,
-- fromMark, '' for none) is told too: it did not ask for this (a leave, an operator's
-- removal), and it is told the grant in its older form, 'G|<from>|<locker>|<first token>', in
-- which a version before the time finds from. It returns the locker granted (or ''), the
-- first token of its block (or 0), the window (ms, 0 for none) and at (or 0).
local function pass(from, fromMark, skip)
    if A.gap_every ~= '' and not redis.call('get', GAP) then
        redis.call('set', GAP, NOW_MS + tonumber(A.gap_window), 'PX', A.gap_every)
        redis.call('del', K)
        tell('R|' .. from .. '|' .. A.gap_window, inLine(fromMark))
        return '', 0, tonumber(A.gap_window), 0
    end
    local m, locker, lease, n, marks, at = live(skip)
    if m and room(n) then -- (without room, the key is left free: the next take says why)
        redis.call('set', K, locker, 'PX', lease)
        local first = tokens(n, locker)
        if tonumber(A.fence_ttl) < tonumber(lease) then -- (tokens kept FIRST for fence_ttl at least)
            lengthen(FIRST, lease) -- (the grantee's lease is longer than the releaser's: its restart check needs FIRST while it holds)
        end
        dequeue(m)
        local grant = '|' .. from .. '|' .. locker .. '|' .. string.format('%.0f', first)
        tell('G|at=' .. string.format('%.0f', NOW_US) .. grant, {m})
        if fromMark ~= m then
            tell('G' .. grant, {fromMark}) -- (the form a version before the time reads in full)
        end
        firstNow(from, marks, at + 1, lease)
        return locker, first, 0, NOW_US
    end
    redis.call('del', K)
    tell('R|' .. from .. '|0', inLine(fromMark))
    return '', 0, 0, 0
end

-- lostAnew lets the key go when it holds locker (acquisition seq) in a holding the request's
-- tenure did not begin with: taken anew for it after it had left it (a late copy of the
-- tenure's own take, or a grant to the entry such a copy made, after an empty restart wiped
-- the key), while others may have held it in between, unknown to the tenure. The acquisition
-- is settled, and the locker remembered as a removed one is (FORCED), so that its release and
-- every copy of this request answer gone: its holder learns of the loss whichever answer it
-- gets.
local function lostAnew(locker, seq)
    settle(seq)
    removed(locker)
    pass(locker, '')
end

-- passed is the reply of a script that let the key go: code, then what pass returned.
local function passed(code, from, fromMark, skip)
    local locker, first, gap, at = pass(from, fromMark, skip)
    return {code, locker, first, gap, at}
end

-- A request of a process whose releases of holdings went unanswered (they are retried) names
-- those holdings (A.unreleased, oldest first) while the retries go on. One that is not
-- settled (no release of it ran) and that the key no longer holds, or holds anew
-- (takenAnew), was taken from its holder before any release (lost by Redis: a failover, an
-- empty restart). It is remembered as removed (FORCED), as an operator's removal is, before
-- this request settles anything: its retried release, which may find it settled by a newer
-- acquisition's release, yield or leave, or by an operator's removal of a newer holding,
-- answers gone, not settled, and its holder learns of the loss.
if A.unreleased ~= '' then
    counter() -- (a counter dlock never wrote stops the script before it writes)
    local origins, i = {}, 0
    for o in string.gmatch(A.unreleased_origin, '%S+') do
        origins[#origins + 1] = o ~= '0' and o or '' -- ('0': unknown)
    end
    local done = tonumber(redis.call('get', DONE) or '-1')
    for l in string.gmatch(A.unreleased, '%S+') do
        i = i + 1
        local u = numberOf(l, OWNER)
        if u and u > done and (redis.call('get', K) ~= l or takenAnew(l, origins[i] or '')) then
            removed(l)
        elseif u and forced(l) then
            removed(l) -- (kept among the newest while its release is retried: see FORCED_KEPT)
        end
    end
end
