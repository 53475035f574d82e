-- force.lua: an operator's last resort: delete the lock key whoever holds it, and wake the
-- waiters as a release does. The holder is not told here; it learns of the loss at its next
-- renewal or release. The fencing counter and the settled marks stay: tokens keep increasing,
-- and no late request of a settled acquisition can take the key.
-- KEYS[1]  the lock key
-- ARGV[1]  the release channel, or '' to publish nothing
-- ARGV[2]  the command that publishes ('publish', or 'spublish' for sharded channels)
-- Returns the holder that was deleted, or '' when the key was free.
local holder = redis.call('get', KEYS[1])
if not holder then
    return ''
end
redis.call('del', KEYS[1])
if ARGV[1] ~= '' then
    redis.call(ARGV[2], ARGV[1], 'R|' .. holder)
end
return holder
