-- prelude.lua: what every script of this directory shares; it is put in front of each one.
--
-- Every script takes the same seven keys, which share the lock key's Redis Cluster slot:
--   KEYS[1]  K, the lock key DLOCK_<type>_<target>: the locker of the acquisition that holds
--            it (<owner><sequence number>), or 'reserved|<mark>' while it waits for the process
--            <mark> that is first in line to take it; absent when free
--   KEYS[2]  {K}:fence, the fencing counter: the largest token handed out or reserved
--   KEYS[3]  {K}:line, the waiting line: a sorted set of processes (their marks) by arrival
--   KEYS[4]  {K}:due, the same processes by the time (server ms) their entry expires unless
--            renewed: an entry outlives its process by at most its time to live
--   KEYS[5]  {K}:done:<owner>, the owner's settled mark: no request of an acquisition of that
--            owner numbered at or below it can take the key (released, given back, failed,
--            removed by an operator, left, or older than one of the owner's that took the key)
--   KEYS[6]  {K}:check:<owner>, the owner's checked mark: the largest yield check number that
--            ran (a mark of its own, so that it does not settle the tenure's locker)
--   KEYS[7]  {K}:forced:<owner>, the owner's locker an operator removed last (ForceRelease):
--            its release and renewals answer "gone", so that its holder learns of the loss
-- Return codes mean the same in every script: 1 taken/renewed/released, 0 held by another or
-- gone, -1 settled already (a late or repeated copy), 2 yielded to the next in line.
local K, FENCE, LINE, DUE, DONE, CHECK, FORCED = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local RESERVED = 'reserved|'
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

-- forced reports whether locker is the owner's one an operator removed last.
local function forced(locker)
    return redis.call('get', FORCED) == locker
end

-- settle raises the owner's settled mark to seq; the mark only rises, and each settle makes it
-- live at least ttl more.
local function settle(seq, ttl)
    if seq == '' then
        return
    end
    if tonumber(seq) > tonumber(redis.call('get', DONE) or '-1') then
        redis.call('set', DONE, seq, 'PX', math.max(tonumber(ttl), redis.call('pttl', DONE)))
    else
        lengthen(DONE, ttl)
    end
end

-- tokens reserves n fencing tokens and returns the first: max(counter + 1, server clock in
-- microseconds). The counter then holds the last of them. Tokens keep increasing when the
-- counter expires or Redis restarts empty, as long as the server clock does not go back.
local function tokens(n, ttl)
    local first = tonumber(redis.call('get', FENCE) or '0') + 1
    if NOW_US > first then
        first = NOW_US
    end
    local keep = math.max(tonumber(ttl), redis.call('pttl', FENCE))
    redis.call('set', FENCE, string.format('%.0f', first + tonumber(n) - 1), 'PX', keep)
    return first
end

-- unreserve lowers the counter to last, the last token a holder handed out, when the holder
-- lets the key go with tokens of its block unused: the next holder's tokens follow on from
-- the last one used, not from the end of a block nobody used. Only the key's holder calls it.
local function unreserve(last)
    if last ~= '' and tonumber(redis.call('get', FENCE) or '0') > tonumber(last) then
        local keep = redis.call('pttl', FENCE)
        if keep > 0 then
            redis.call('set', FENCE, last, 'PX', keep)
        end
    end
end

-- purge drops the entries whose time ran out: their processes stopped renewing them.
local function purge()
    local dead = redis.call('zrangebyscore', DUE, '-inf', NOW_MS)
    for _, m in ipairs(dead) do
        redis.call('zrem', LINE, m)
        redis.call('zrem', DUE, m)
    end
end

-- enqueue puts mark at the end of the line, or renews its entry where it stands.
local function enqueue(mark, ttl)
    redis.call('zadd', LINE, 'NX', NOW_US, mark)
    redis.call('zadd', DUE, NOW_MS + tonumber(ttl), mark)
    lengthen(LINE, ttl)
    lengthen(DUE, ttl)
end

local function dequeue(mark)
    redis.call('zrem', LINE, mark)
    redis.call('zrem', DUE, mark)
end

-- pass lets the key go after its holder (from) gave it up: to the first live process in line,
-- for which it is reserved ('reserved|<mark>', which only that process's lock.lua can take,
-- for reserve ms) and which leaves the line; or free when nobody waits. It publishes who the
-- key is for ('R|<from>|<mark>', '' for nobody): only that process acts on it. It returns the
-- mark, or ''.
local function pass(from, reserve, channel, publish)
    purge()
    local first = redis.call('zrange', LINE, 0, 0)[1]
    if first then
        redis.call('set', K, RESERVED .. first, 'PX', reserve)
        dequeue(first)
    else
        redis.call('del', K)
        first = ''
    end
    if channel ~= '' then
        redis.call(publish, channel, 'R|' .. from .. '|' .. first)
    end
    return first
end
