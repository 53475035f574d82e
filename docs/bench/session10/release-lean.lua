-- MEASUREMENT ONLY, NOT SAFE: the release of a relocking turn cut to what a grant needs, run
-- after the shared prelude as release.lua is. It drops the settled mark, the counter's
-- unreserve, the liveness check of the first in line, the message to the next in line, the
-- line's time to live and the place in line. docs/benchmarks.md ("Where a turn between
-- processes goes") measures it in place of processor/lua/release.lua, to bound what a leaner
-- script could give with the Go side unchanged.
counter()
local locker = A.locker
if redis.call('get', K) ~= locker then
    return {0, ''}
end
local m = redis.call('zrange', LINE, 0, 0)[1]
if not m then
    redis.call('del', K)
    return {1, '', 0, 0, 0}
end
local glocker, lease, n = entry(m)
redis.call('set', K, glocker, 'PX', lease)
local first = tokens(n, glocker)
redis.call('zrem', LINE, m)
redis.call('hdel', WANT, m)
redis.pcall(A.publish, A.channel .. ':' .. m, 'G|at=' .. string.format('%.0f', NOW_US) .. '|' .. locker .. '|' .. glocker .. '|' .. string.format('%.0f', first))
if A.next ~= '' and A.mark ~= '' then
    redis.call('zadd', LINE, 'NX', NOW_US, A.mark)
    redis.call('hset', WANT, A.mark, A.next .. '|' .. A.next_lease .. '|' .. A.next_tokens .. '|' .. NOW_MS .. '|' .. (NOW_MS + tonumber(A.entry_ttl)) .. '|1')
    return {1, glocker, first, 0, NOW_US, tonumber(lease), 1, 1}
end
return {1, glocker, first, 0, NOW_US}
