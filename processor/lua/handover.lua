-- handover.lua: pass a held lock from one acquisition of this process to the next, in one
-- round trip instead of a release and an acquire, unless it should go to another process:
-- then the key is reserved for that process ("reserved|<its mark>", which no locker can
-- equal) for a short time, during which only that process's own lock.lua can take it.
-- The old acquisition is settled as by release.lua.
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter
-- KEYS[3]  the waiting mark
-- KEYS[4]  this process's settled mark, {DLOCK_<type>_<target>}:done:<owner>
-- ARGV[1]  the old locker
-- ARGV[2]  the new locker
-- ARGV[3]  the new acquisition's lease in milliseconds
-- ARGV[4]  how long the fencing counter is kept, in milliseconds
-- ARGV[5]  the release channel, or '' to publish nothing
-- ARGV[6]  this process's mark
-- ARGV[7]  '1' if the lock should go free when another process left its waiting mark
-- ARGV[8]  the old locker's sequence number ('' when it has none)
-- ARGV[9]  the new locker's sequence number ('' when it has none)
-- ARGV[10] how long the settled mark lasts, in milliseconds
-- ARGV[11] how long a reservation lasts, in milliseconds
-- ARGV[12] how long a waiting mark lasts, in milliseconds
-- ARGV[13] the command that publishes ('publish', or 'spublish' for sharded channels)
-- Returns the new token (> 0) when handed over; 0 when the key no longer holds the old locker
-- or the new acquisition was settled already (this request came late); -1 when the key was
-- reserved for the waiting process instead ("R|<old locker>" published, and this process's
-- mark left in its place, since it has waiters).
local done = tonumber(redis.call('get', KEYS[4]) or '-1')
local function settle(seq) -- as in release.lua
    if seq ~= '' and tonumber(seq) > done then
        redis.call('set', KEYS[4], seq, 'PX', math.max(tonumber(ARGV[10]), redis.call('pttl', KEYS[4])))
    end
end
local holder = redis.call('get', KEYS[1])
if holder == ARGV[2] then
    -- this very hand-over ran before and its reply was lost (the client sent it again);
    -- never shorten the key: its holder may have renewed or extended it since
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[3]) then
        redis.call('pexpire', KEYS[1], ARGV[3])
    end
elseif holder ~= ARGV[1] then
    if ARGV[8] ~= '' and tonumber(ARGV[8]) <= done then
        return -1 -- this very hand-over ran before and yielded (the client sent it again)
    end
    return 0
elseif ARGV[9] ~= '' and tonumber(ARGV[9]) <= done then
    return 0
elseif ARGV[7] == '1' then
    local want = redis.call('get', KEYS[3])
    if want and want ~= ARGV[6] then
        redis.call('set', KEYS[1], 'reserved|' .. want, 'PX', ARGV[11])
        redis.call('set', KEYS[3], ARGV[6], 'PX', ARGV[12]) -- our waiters want it back
        settle(ARGV[8])
        if ARGV[5] ~= '' then
            redis.call(ARGV[13], ARGV[5], 'R|' .. ARGV[1])
        end
        return -1
    end
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local token = tonumber(redis.call('get', KEYS[2]) or '0') + 1
if now > token then
    token = now
end
redis.call('set', KEYS[2], string.format('%.0f', token), 'PX', ARGV[4])
if holder == ARGV[1] then
    redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3])
    settle(ARGV[8])
end
return token
