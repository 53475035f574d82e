-- force.lua: an operator's last resort: delete the lock key if it still holds the locker the
-- operator saw (as State reports it), settle that acquisition (no late or repeated request of
-- it can take the key again) and wake the waiters as a release does. The holder is not told
-- here; it learns of the loss at its next renewal or release. A second copy of this request
-- finds the locker gone and changes nothing, so it can never remove a later holder's key.
-- KEYS[1]  the lock key
-- KEYS[2]  the holder's settled mark, {DLOCK_<type>_<target>}:done:<owner>
-- ARGV[1]  the locker to remove
-- ARGV[2]  the release channel, or '' to publish nothing
-- ARGV[3]  the command that publishes ('publish', or 'spublish' for sharded channels)
-- ARGV[4]  the locker's sequence number ('' when it has none)
-- ARGV[5]  how long the settled mark lasts, in milliseconds
-- Returns 1 when the key held the locker and was deleted, 0 otherwise.
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
if ARGV[4] ~= '' then
    local done = tonumber(redis.call('get', KEYS[2]) or '-1')
    if tonumber(ARGV[4]) > done then
        redis.call('set', KEYS[2], ARGV[4], 'PX', math.max(tonumber(ARGV[5]), redis.call('pttl', KEYS[2])))
    end
end
if ARGV[2] ~= '' then
    redis.call(ARGV[3], ARGV[2], 'R|' .. ARGV[1])
end
return 1
