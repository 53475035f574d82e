--STANDALONE
-- MEASUREMENT ONLY, NOT SAFE: release-lean.lua without the shared prelude (processor.newScripts
-- was changed, for the measurement, to send a body that starts with "--STANDALONE" alone).
local K, FENCE, LINE, WANT, FIRST = KEYS[1], KEYS[2], KEYS[3], KEYS[7], KEYS[9]
local locker = ARGV[1]
if redis.call('get', K) ~= locker then
    return {0, ''}
end
local clock = redis.call('time')
local NOW_US = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local NOW_MS = math.floor(NOW_US / 1000)
local m = redis.call('zrange', LINE, 0, 0)[1]
if not m then
    redis.call('del', K)
    return {1, '', 0, 0, 0}
end
local w = redis.call('hget', WANT, m)
local at = string.find(w, '|%d+|%d+|%d+|%d+|[01]$')
local glocker = string.sub(w, 1, at - 1)
local lease, n = string.match(w, '^|(%d+)|(%d+)|', at)
redis.call('set', K, glocker, 'PX', lease)
local fence = tonumber(redis.call('get', FENCE) or '0')
local first = math.max(fence + 1, NOW_US)
fence = first + tonumber(n) - 1
local keep = math.max(tonumber(ARGV[8]), redis.call('pttl', FENCE))
redis.call('set', FENCE, string.format('%.0f', fence), 'PX', keep)
redis.call('set', FIRST, string.format('%.0f', first) .. '|' .. glocker, 'PX', keep)
redis.call('zrem', LINE, m)
redis.call('hdel', WANT, m)
redis.pcall(ARGV[12], ARGV[11] .. ':' .. m, 'G|at=' .. string.format('%.0f', NOW_US) .. '|' .. locker .. '|' .. glocker .. '|' .. string.format('%.0f', first))
local nxt = ARGV[17] or ''
if nxt ~= '' and ARGV[4] ~= '' then
    redis.call('zadd', LINE, 'NX', NOW_US, ARGV[4])
    redis.call('hset', WANT, ARGV[4], nxt .. '|' .. ARGV[18] .. '|' .. ARGV[19] .. '|' .. NOW_MS .. '|' .. (NOW_MS + tonumber(ARGV[9])) .. '|1')
    return {1, glocker, first, 0, NOW_US, tonumber(lease), 1, 1}
end
return {1, glocker, first, 0, NOW_US}
