package redistest

// The README's least-privilege user ("Least privilege"), the one list the tests that run as
// that user read; TestACLListsAreTheREADMEs holds the README to it.
var (
	// ACLCommands are the commands the mutex needs.
	ACLCommands = []string{
		"evalsha", "eval", "set", "get", "del", "pexpire", "pttl", "publish", "time",
		"zadd", "zrem", "zrange", "zrank", "hset", "hget", "hdel", "pubsub|numsub",
		"subscribe", "unsubscribe", "ping",
	}
	// ACLFamilyCommands are what the read-write lock and the semaphore need besides (shared.lua).
	ACLFamilyCommands = []string{"exists", "hgetall", "zcard", "zrangebyscore", "zremrangebyscore", "zscore"}
	// ACLClusterCommands are what a Cluster needs besides: sharded pub/sub, go-redis's COMMAND
	// and CLUSTER SLOTS, and ASKING while a slot migrates.
	ACLClusterCommands = []string{"command", "spublish", "ssubscribe", "sunsubscribe", "pubsub|shardnumsub", "cluster|slots", "asking"}
	// ACLPatterns are the keys and channels.
	ACLPatterns = []string{"~DLOCK_*", "~{DLOCK_*}:*", "&{DLOCK_*}:released:*", "&DLOCK_*:released:*"}
)

// ACLRules returns ACL SETUSER's rules for a user with the password, allowed the commands of
// each list and the README's keys and channels.
func ACLRules(password string, commands ...[]string) []string {
	rules := []string{"reset", "on", ">" + password, "-@all"}
	for _, list := range commands {
		for _, c := range list {
			rules = append(rules, "+"+c)
		}
	}
	return append(rules, ACLPatterns...)
}
