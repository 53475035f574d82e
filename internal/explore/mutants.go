package explore

import (
	"fmt"
	"strings"

	"github.com/dlockgo/dlock/processor"
)

// Mutant is a copy of the scripts with one guard broken: a hole of the late-copy class put
// back, which the explorer must find.
type Mutant struct {
	Name   string // what the mutant breaks
	Script string // the script changed ("prelude" for the shared part)
	Old    string // the text replaced (it must occur exactly once)
	New    string
}

// Mutants are the holes the explorer is known to find: the defects of the second and third
// reviews put back, and the guards the scripts rest on broken one at a time. (Two guards are
// not here: a grant taking its grantee out of the line, and a settle dropping its process's
// expired entry. Settling takes a settled acquisition's entry out of the line, and a grant
// skips an expired one, so breaking either breaks no invariant the explorer checks;
// processor's TestLineServesInOrder and TestSettleDropsAnExpiredEntry check them directly.
// lock.lua's refusal of a copy older than its owner's holder or entry is here: a copy of the
// take of a tenure its process counted lost, arriving while the key still holds it and the
// process waits with a newer attempt, takes the process out of line without it (kept in
// line). So are the guards that outlive an empty restart: renew.lua's check of the holding a
// tenure began with (origin), and the server clock under the tokens.)
var Mutants = []Mutant{
	{"a settled attempt still takes the key (lock.lua ignores the settled mark)", "lock",
		"if settled(seq) then\n    lengthen(DONE", "if false then\n    lengthen(DONE"},
	{"a late renewal cuts short what Extend set (renew.lua sets the lease instead of lengthening it)", "renew",
		"lengthen(K, A.lease)", "redis.call('pexpire', K, A.lease)"},
	{"a copy of lock.lua cuts short what Extend set (its repeated branch sets the lease)", "lock",
		"if holder == locker then\n    lengthen(K, A.lease)", "if holder == locker then\n    redis.call('pexpire', K, A.lease)"},
	{"a repeated ForceRelease removes the next holder (force.lua does not check its holder)", "force",
		"if redis.call('get', K) ~= A.locker then", "if not redis.call('get', K) then"},
	{"a copy of a ForceRelease that removed its holder answers gone (force.lua keeps no record of the removal)", "force",
		"redis.call('set', REMOVED, A.request .. '|' .. reply[2], 'PX', A.done_ttl)\n", ""},
	{"a force answers that a copy of it removed its holder when another request did (force.lua does not compare the names)", "force",
		"if A.request ~= '' and string.sub(by, 1, #A.request + 1) == A.request .. '|' then", "if by ~= '' then"},
	{"a late copy of an acquisition revives a holder an operator removed (force.lua does not settle)", "force",
		"settle(A.seq)\nremoved(A.locker, A.done_ttl)", "removed(A.locker, A.done_ttl)"},
	{"a waiter that gave up stays in the line (leave.lua does not settle)", "leave",
		"local mark, upto = A.mark, A.upto\nsettle(upto)", "local mark, upto = A.mark, A.upto"},
	{"a yield check runs twice (renew.lua ignores the checked mark)", "renew",
		"if tonumber(A.check) <= checked or settled(A.check) then", "if false then"},
	{"a give-back does not settle (release.lua of a locker that does not hold the key)", "release",
		"    settle(seq)\n    return {0, ''}", "    return {0, ''}"},
	{"a settled acquisition stays in line (settle does not take its entry out)", "prelude",
		"if expires and (expires <= NOW_MS or n <= tonumber(seq)) then", "if expires and expires <= NOW_MS then"},
	{"a holder an operator removed is not told at its release (release.lua ignores {K}:forced)", "release",
		"if settled(seq) and not forced(locker) then", "if settled(seq) then"},
	{"the fencing counter is not kept (tokens repeat)", "prelude",
		"    redis.call('set', FENCE, string.format('%.0f', fence), 'PX', keep)\n", ""},
	{"a failed attempt is not settled (a copy of it takes the key later)", "lock",
		"else\n    refuse(holder)\nend", "end"},
	{"an attempt given up blocks the key (leave.lua does not let go of a key a late copy of it took)", "leave",
		"if n and upto ~= '' and n <= tonumber(upto) then", "if false then"},
	{"a renewal of a locker that lost the key renews another's (renew.lua does not compare the holder)", "renew",
		"if redis.call('get', K) ~= locker then\n    if settled(seq) and not forced(locker) then", "if not redis.call('get', K) then\n    if settled(seq) and not forced(locker) then"},
	{"a grant goes to a process that stopped renewing its entry (pass ignores its freshness)", "prelude",
		"elseif m ~= skip and isLive(m, lease, renewed, listened) then", "elseif m ~= skip then"},
	{"a waiting attempt's answer hides what it saw of the tokens (a late grant message is counted from it)", "lock",
		"seen = math.max(seen, NOW_US)", "seen = 0"},
	{"a release lowers the counter below its holding (unreserve trusts a stale last token)", "prelude",
		"local floor = math.max(tonumber(last), tonumber(first) - 1)", "local floor = tonumber(last)"},
	{"a grant goes to a process that may have died (every process counts as listening on its channel)", "prelude",
		"return tonumber(r[2] or 0) > 0", "return true"},
	{"a grant goes to a process that stopped listening, its entry fresh (a process killed after it asked)", "prelude",
		"    if listened then\n        return hears(m)", "    if listened then\n        return true"},
	{"a grant goes to a process that died with an ask on its way (its late ask renews its entry as of now)", "prelude",
		"(A.listening == '1' or select(6, waiting(mark)))", "false"},
	{"a grant goes to a process that died with a request on its way, which said it counts itself heard (the claim ignored)", "prelude",
		"(A.listening == '1' or select(6, waiting(mark)))", "select(6, waiting(mark))"},
	{"a release passes over a process that does not listen and asked just now (the key left free while it waits)", "prelude",
		"    return NOW_MS - renewed <= math.floor(tonumber(lease) / 3)", "    return false"},
	{"a grant reserves no tokens (the grantee's tokens repeat)", "prelude",
		"        local first = tokens(n, locker)", "        local first = counter()"},
	{"a late copy of a relocking release stands in line with a settled next (mayStand ignores the settled mark)", "prelude",
		"return n ~= nil and done ~= nil and n > done and (had == nil or had <= n)", "return n ~= nil and done ~= nil and (had == nil or had <= n)"},
	{"a copy of the take of a tenure its process counted lost takes it out of line (lock.lua's stale-copy check after the holder compare)", "lock",
		staleCopyCheck + heldAgain, heldAgain + staleCopyCheck},
	{"a refused take's locker is not remembered as removed (a holding an empty restart wiped, whose take's late copy was refused, answers settled at its release)", "lock",
		"    if seq ~= '' and holder ~= locker then\n        removed(locker)\n    end\n", ""},
	{"a stale copy of the holder's own take marks it removed (a copy of its release answers gone: a loss that did not happen)", "lock",
		"    if seq ~= '' and holder ~= locker then\n        removed(locker)", "    if seq ~= '' then\n        removed(locker)"},
	{"a stale copy of a take is not refused (lock.lua's stale-copy check gone)", "lock",
		"if own and own > tonumber(seq) then", "if false then"},
	{"a renewal after an empty restart renews a holding its tenure did not begin with (renew.lua ignores origin)", "renew",
		"if takenAnew(locker) then", "if false then"},
	{"a loss found by a release's retry is hidden by a request beside it (the prelude does not mark the unreleased locker removed)", "prelude",
		"            removed(l)\n", ""},
	{"a repeated release of a holding Redis lost answers settled (release.lua does not mark it removed)", "release",
		"        removed(locker) -- (a holding lost", "        -- (a holding lost"},
	{"a release's retry tells a loss that did not happen (the prelude marks the unreleased locker removed while the key holds it)", "prelude",
		"(redis.call('get', K) ~= l or takenAnew(l, origins[i] or ''))", "true"},
	{"a copy of a released holding's release answers gone while another locker of its owner is remembered removed (forced matches any)", "prelude",
		"    if v == locker then\n        return true", "    if v ~= locker then\n        return true"},
	{"tokens start again from 1 once the counter is gone (an empty restart wiped it: the server clock not used)", "prelude",
		"local first = math.max(counter() + 1, NOW_US)", "local first = redis.call('exists', FENCE) == 0 and 1 or math.max(counter() + 1, NOW_US)"},
}

// staleCopyCheck and heldAgain are two blocks of lock.lua, in that order: the refusal of a
// copy older than its owner's holder or entry, and the branch that finds the key its own
// already. A mutant swaps them.
const (
	staleCopyCheck = `local own = seq ~= '' and math.max(numberOf(holder, owner) or -1, waits and numberOf(waits, owner) or -1)
if own and own > tonumber(seq) then
    refuse(holder)
    return {-1, 0}
end
`
	heldAgain = `if holder == locker then
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
`
)

// Scripts returns the scripts with the mutant applied, for Options.Scripts (a mutant of the
// prelude replaces it in front of every script).
func (m Mutant) Scripts() (map[string]string, error) {
	src := processor.Sources()
	body, ok := src[m.Script]
	if !ok {
		return nil, fmt.Errorf("no script %q", m.Script)
	}
	if n := strings.Count(body, m.Old); n != 1 {
		return nil, fmt.Errorf("mutant %q: the text to replace occurs %d times in %s.lua", m.Name, n, m.Script)
	}
	return map[string]string{m.Script: strings.Replace(body, m.Old, m.New, 1)}, nil
}
