package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel settings of a started Sentinel deployment: a master silent for SentinelDownAfter is
// subjectively down, and failed over once a majority of sentinels agree.
const (
	SentinelDownAfter       = 1000 * time.Millisecond
	SentinelFailoverTimeout = 3000 * time.Millisecond
)

// sentinelSeq numbers the deployments of this process, for their master names.
var sentinelSeq atomic.Int64

// Sentinel is a master, one replica and a set of sentinels watching them, all redis-server
// processes on loopback ports, for tests. Its methods are safe for concurrent use, though
// killing and failing over are meant to be driven by one test goroutine.
//
// The sentinels act on their own too: right after a failover that followed a kill, each of
// them marks the new master down for a moment and, counting the other sentinels' still-valid
// "the old master is down" answers, may fail it over again (see quietMaster). The helpers that
// change the deployment therefore wait until it is quiet before they act, and RestartKilled
// waits until it has settled again.
type Sentinel struct {
	bin  string
	name string

	mu        sync.Mutex
	data      []*proc // the master and the replica, whatever their roles now; guarded by mu
	sentinels []*proc // guarded by mu
}

// StartSentinel starts a master, a replica of it (REPLICAOF) and sentinels sentinels watching
// them with a quorum of a majority, and returns when every sentinel sees the master, its
// connected replica and every other sentinel (so a failover can be authorized). It returns an
// error wrapping ErrNoRedisServer when there is no redis-server.
func StartSentinel(sentinels int) (*Sentinel, error) {
	if sentinels < 1 {
		return nil, fmt.Errorf("redistest: StartSentinel(%d): need a sentinel", sentinels)
	}
	bin, err := redisServer()
	if err != nil {
		return nil, err
	}
	// A name of its own: sentinels take hello messages for the master of that name from any
	// instance they are connected to, so two deployments of one name (another test process
	// that reuses a port one of ours had) would adopt each other's masters and sentinels.
	name := fmt.Sprintf("dlockmaster-%d-%d", os.Getpid(), sentinelSeq.Add(1))
	s := &Sentinel{bin: bin, name: name}
	if err := s.start(sentinels); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sentinel) start(sentinels int) error {
	master, err := startProc(s.bin, "master", 1, func(dir string, ports []int) ([]string, error) {
		return dataArgs(dir, ports[0]), nil
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.data = append(s.data, master)
	s.mu.Unlock()
	replica, err := startProc(s.bin, "replica", 1, func(dir string, ports []int) ([]string, error) {
		return append(dataArgs(dir, ports[0]), "--replicaof", "127.0.0.1", strconv.Itoa(master.port)), nil
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.data = append(s.data, replica)
	s.mu.Unlock()
	if err := waitFor("replica "+replica.addr+" synced", settleTimeout, func() error {
		return replicaOf(replica, master.port)
	}); err != nil {
		return err
	}
	quorum := sentinels/2 + 1
	for i := range sentinels {
		p, err := startProc(s.bin, "sentinel"+strconv.Itoa(i), 1, func(dir string, ports []int) ([]string, error) {
			port := ports[0]
			conf := filepath.Join(dir, "sentinel.conf")
			text := strings.Join([]string{
				"port " + strconv.Itoa(port),
				"bind 127.0.0.1",
				"protected-mode no",
				"daemonize no",
				"dir " + dir,
				"logfile " + filepath.Join(dir, "redis.log"),
				fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", s.name, master.port, quorum),
				fmt.Sprintf("sentinel down-after-milliseconds %s %d", s.name, SentinelDownAfter.Milliseconds()),
				fmt.Sprintf("sentinel failover-timeout %s %d", s.name, SentinelFailoverTimeout.Milliseconds()),
				fmt.Sprintf("sentinel parallel-syncs %s 1", s.name),
				"",
			}, "\n")
			if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
				return nil, err
			}
			return []string{conf, "--sentinel"}, nil
		})
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.sentinels = append(s.sentinels, p)
		s.mu.Unlock()
	}
	_, err = s.waitSettled(settleTimeout)
	return err
}

// replicaOf checks that p replicates from the master on port, connected and synced.
func replicaOf(p *proc, port int) error {
	repl, err := p.info("INFO", "replication")
	if err != nil {
		return err
	}
	if repl["role"] != "slave" || repl["master_port"] != strconv.Itoa(port) ||
		repl["master_link_status"] != "up" || repl["master_sync_in_progress"] != "0" {
		return fmt.Errorf("%s: role %s, master port %s (want %d), link %s, sync in progress %s", p.addr,
			repl["role"], repl["master_port"], port, repl["master_link_status"], repl["master_sync_in_progress"])
	}
	return nil
}

// quietMaster returns the master if every running sentinel names it, none is failing over,
// sees it down or lacks a connection to it, and it runs with role:master.
//
// "Connected" matters: after a switch a sentinel reconnects to the new master only a second
// after its last attempt on the old address (it retries a dead master once a second), while it
// counts the new master's silence from the switch. So about a second after a failover that
// followed a kill, a sentinel may mark the new master down (+sdown) on the very tick it
// reconnects, before the PING it sends then is answered; the other sentinels' answers that
// the killed master was down are still valid for 5 s and count towards the quorum, so that
// is +odown at once and a new failover, which promotes the restarted old master if it is a
// good replica by then. The sentinel clears its disconnected flag on that same tick, and it
// answers us only between ticks, so once it shows its master as plain "master" the moment has
// passed; a failover it started then shows as failover_in_progress.
func (s *Sentinel) quietMaster() (*proc, error) {
	master, err := s.agreedMaster()
	if err != nil {
		return nil, err
	}
	for _, p := range s.liveSentinels() {
		m, err := kv(p.do("SENTINEL", "MASTER", s.name).Result())
		if err != nil {
			return nil, fmt.Errorf("SENTINEL MASTER on %s: %w", p.addr, err)
		}
		if addr := net.JoinHostPort(m["ip"], m["port"]); addr != master || m["flags"] != "master" {
			return nil, fmt.Errorf("sentinel %s sees master %s as %s (failover state %q)", p.addr, addr,
				m["flags"], m["failover-state"])
		}
	}
	p := s.dataByAddr(master)
	if p == nil || !p.running() {
		return nil, fmt.Errorf("the sentinels name %s, which is not running", master)
	}
	repl, err := p.info("INFO", "replication")
	if err != nil {
		return nil, err
	}
	if repl["role"] != "master" {
		return nil, fmt.Errorf("master %s says role:%s", master, repl["role"])
	}
	return p, nil
}

// settledMaster returns the master if it is quiet (quietMaster), every other running data
// node replicates from it, connected and synced, every running sentinel sees those as its
// connected replicas and knows every other running sentinel, and no sentinel still counts
// another's answer that its master is down (master_down, kept up to 5 s after the last
// answer; see quietMaster for what such a stale answer can start).
func (s *Sentinel) settledMaster() (*proc, error) {
	master, err := s.quietMaster()
	if err != nil {
		return nil, err
	}
	data := s.liveData()
	for _, d := range data {
		if d != master {
			if err := replicaOf(d, master.port); err != nil {
				return nil, err
			}
		}
	}
	sentinels := s.liveSentinels()
	for _, p := range sentinels {
		others, err := p.do("SENTINEL", "SENTINELS", s.name).Slice()
		if err != nil {
			return nil, fmt.Errorf("SENTINEL SENTINELS on %s: %w", p.addr, err)
		}
		if len(others) != len(sentinels)-1 {
			return nil, fmt.Errorf("sentinel %s knows %d other sentinels, want %d", p.addr, len(others), len(sentinels)-1)
		}
		for _, o := range others {
			m, err := kv(o, nil)
			if err != nil {
				return nil, err
			}
			if m["flags"] != "sentinel" {
				return nil, fmt.Errorf("sentinel %s sees sentinel %s as %s", p.addr,
					net.JoinHostPort(m["ip"], m["port"]), m["flags"])
			}
		}
		replicas, err := p.do("SENTINEL", "REPLICAS", s.name).Slice()
		if err != nil {
			return nil, fmt.Errorf("SENTINEL REPLICAS on %s: %w", p.addr, err)
		}
		seen := map[string]bool{}
		for _, r := range replicas {
			m, err := kv(r, nil)
			if err != nil {
				return nil, err
			}
			if m["flags"] == "slave" && m["master-link-status"] == "ok" && m["master-port"] == strconv.Itoa(master.port) {
				seen[net.JoinHostPort(m["ip"], m["port"])] = true
			}
		}
		for _, d := range data {
			if d != master && !seen[d.addr] {
				return nil, fmt.Errorf("sentinel %s does not see replica %s connected to %s", p.addr, d.addr, master.addr)
			}
		}
	}
	return master, nil
}

// waitQuiet waits until the deployment is quiet (quietMaster) and returns the master.
func (s *Sentinel) waitQuiet(timeout time.Duration) (*proc, error) {
	var master *proc
	err := waitFor("a master every sentinel agrees on, with no failover under way", timeout, func() (err error) {
		master, err = s.quietMaster()
		return err
	})
	return master, err
}

// waitSettled waits until the deployment has settled (settledMaster) and returns the master.
func (s *Sentinel) waitSettled(timeout time.Duration) (*proc, error) {
	var master *proc
	err := waitFor("sentinels settled on the master and its replicas", timeout, func() (err error) {
		master, err = s.settledMaster()
		return err
	})
	return master, err
}

// kv turns a flat array of field names and values into a map.
func kv(v any, err error) (map[string]string, error) {
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok || len(a)%2 != 0 {
		return nil, fmt.Errorf("redistest: %v is not a flat array of pairs", v)
	}
	m := make(map[string]string, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		m[fmt.Sprint(a[i])] = fmt.Sprint(a[i+1])
	}
	return m, nil
}

func (s *Sentinel) liveData() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(s.data), func(p *proc) bool { return !p.running() })
}

func (s *Sentinel) liveSentinels() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(s.sentinels), func(p *proc) bool { return !p.running() })
}

func (s *Sentinel) dataByAddr(addr string) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.data {
		if p.addr == addr {
			return p
		}
	}
	return nil
}

// askMaster returns the master's address according to sentinel p.
func (s *Sentinel) askMaster(p *proc) (string, error) {
	a, err := p.do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.name).StringSlice()
	if err != nil {
		return "", fmt.Errorf("redistest: sentinel %s: %w", p.addr, err)
	}
	if len(a) != 2 {
		return "", fmt.Errorf("redistest: sentinel %s answered %v", p.addr, a)
	}
	return net.JoinHostPort(a[0], a[1]), nil
}

// agreedMaster returns the master's address if every running sentinel names the same one.
func (s *Sentinel) agreedMaster() (string, error) {
	master := ""
	for _, p := range s.liveSentinels() {
		addr, err := s.askMaster(p)
		if err != nil {
			return "", err
		}
		if master != "" && addr != master {
			return "", fmt.Errorf("sentinels disagree on the master: %s and %s", master, addr)
		}
		master = addr
	}
	if master == "" {
		return "", fmt.Errorf("redistest: no sentinel running")
	}
	return master, nil
}

// MasterName returns the name the sentinels monitor the master under.
func (s *Sentinel) MasterName() string { return s.name }

// SentinelAddrs returns the host:port of every sentinel.
func (s *Sentinel) SentinelAddrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var addrs []string
	for _, p := range s.sentinels {
		addrs = append(addrs, p.addr)
	}
	return addrs
}

// Client returns a new sentinel-backed client of the master (redis.NewFailoverClient), with
// go-redis's defaults changed only by tune; the caller closes it.
func (s *Sentinel) Client(tune ...func(*redis.FailoverOptions)) *redis.Client {
	opt := &redis.FailoverOptions{MasterName: s.name, SentinelAddrs: s.SentinelAddrs()}
	for _, f := range tune {
		f(opt)
	}
	return redis.NewFailoverClient(opt)
}

// Master waits until every running sentinel names the same master, none is failing over or
// sees it down, and it runs with role:master, and returns its address. Unlike MasterAddr it
// does not answer in the middle of a failover.
func (s *Sentinel) Master(timeout time.Duration) (string, error) {
	p, err := s.waitQuiet(timeout)
	if err != nil {
		return "", err
	}
	return p.addr, nil
}

// MasterAddr returns the master's address as the first sentinel that answers says.
func (s *Sentinel) MasterAddr() (string, error) {
	var last error = fmt.Errorf("redistest: no sentinel running")
	for _, p := range s.liveSentinels() {
		addr, err := s.askMaster(p)
		if err == nil {
			return addr, nil
		}
		last = err
	}
	return "", last
}

// KillMaster waits until the deployment is quiet (as Master does), kills (SIGKILL) the master
// and returns its address. RestartKilled brings it back as a replica.
func (s *Sentinel) KillMaster() (string, error) {
	p, err := s.waitQuiet(settleTimeout)
	if err != nil {
		return "", err
	}
	p.kill()
	return p.addr, nil
}

// Failover waits until the deployment is quiet (as Master does), asks a sentinel for a
// failover (SENTINEL FAILOVER) and returns the address of the master it fails over, read in
// that quiet state; WaitNewMaster waits for the result. While the sentinel has no replica it
// considers good, or a failover is under way after all, it waits for quiet again and retries;
// any other error ends it (a request that timed out may have started a failover, and a second
// one would move the master back). The old master stays up: it becomes a replica.
func (s *Sentinel) Failover() (string, error) {
	deadline := time.Now().Add(settleTimeout)
	for {
		master, err := s.waitQuiet(time.Until(deadline))
		if err != nil {
			return "", err
		}
		sentinels := s.liveSentinels()
		if len(sentinels) == 0 {
			return "", fmt.Errorf("redistest: no sentinel running")
		}
		err = sentinels[0].do("SENTINEL", "FAILOVER", s.name).Err()
		if err == nil {
			return master.addr, nil
		}
		if !strings.HasPrefix(err.Error(), "NOGOODSLAVE") && !strings.HasPrefix(err.Error(), "INPROG") {
			return "", fmt.Errorf("redistest: SENTINEL FAILOVER %s on %s: %w", s.name, sentinels[0].addr, err)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("redistest: SENTINEL FAILOVER %s: not done after %v: %w", s.name, settleTimeout, err)
		}
		time.Sleep(pollEvery)
	}
}

// WaitNewMaster waits until every running sentinel names the same master other than old, and
// that master is running and says role:master; it returns the new master's address. The
// other data nodes may not replicate from it yet: after SENTINEL FAILOVER the sentinels demote
// the old master only some seconds later (until then it still takes writes from clients
// connected to it); WaitReplicas waits for that.
func (s *Sentinel) WaitNewMaster(old string, timeout time.Duration) (string, error) {
	var addr string
	err := waitFor("new master instead of "+old, timeout, func() error {
		master, err := s.agreedMaster()
		if err != nil {
			return err
		}
		if master == old {
			return fmt.Errorf("the sentinels still name %s", old)
		}
		p := s.dataByAddr(master)
		if p == nil || !p.running() {
			return fmt.Errorf("the sentinels name %s, which is not running", master)
		}
		repl, err := p.info("INFO", "replication")
		if err != nil {
			return err
		}
		if repl["role"] != "master" {
			return fmt.Errorf("new master %s says role:%s", master, repl["role"])
		}
		addr = master
		return nil
	})
	return addr, err
}

// WaitReplicas waits until every running data node other than the master replicates from it,
// connected and synced. (The sentinels learn of it with their next INFO of the replica, up to
// 10 s later; RestartKilled waits for that too.)
func (s *Sentinel) WaitReplicas(timeout time.Duration) error {
	return waitFor("replicas follow the master", timeout, func() error {
		master, err := s.agreedMaster()
		if err != nil {
			return err
		}
		p := s.dataByAddr(master)
		if p == nil || !p.running() {
			return fmt.Errorf("the sentinels name %s, which is not running", master)
		}
		for _, d := range s.liveData() {
			if d != p {
				if err := replicaOf(d, p.port); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// RestartKilled waits until the deployment is quiet (as Master does), starts every killed
// data node again, empty, as a replica of that master, and waits until the deployment has
// settled: the sentinels all name that master, running with role:master, every other data
// node (the restarted ones included) replicates from it, connected and synced, and every
// sentinel sees them as its connected replicas. It returns an error if the sentinels moved
// the master meanwhile.
//
// Waiting for quiet first matters right after a failover that followed a kill: until every
// sentinel is connected to the new master it may still fail it over (see quietMaster), and a
// killed node restarted by then would be the replica it promotes.
func (s *Sentinel) RestartKilled() error {
	p, err := s.waitQuiet(settleTimeout)
	if err != nil {
		return err
	}
	s.mu.Lock()
	data := slices.Clone(s.data)
	s.mu.Unlock()
	for _, d := range data {
		if d.running() {
			continue
		}
		if err := d.start("--replicaof", "127.0.0.1", strconv.Itoa(p.port)); err != nil {
			return fmt.Errorf("redistest: restart %s: %w", d.addr, err)
		}
	}
	master, err := s.waitSettled(settleTimeout)
	if err != nil {
		return err
	}
	if master != p {
		return fmt.Errorf("redistest: the sentinels moved the master from %s to %s while the killed nodes restarted",
			p.addr, master.addr)
	}
	return nil
}

// SyncReplicas makes sure every write made so far to the master has reached every other
// running data node: it waits until the deployment is quiet (as Master does, within timeout),
// writes a marker key to the master and runs WAIT for all of them on that connection, and
// fails if fewer acknowledge within timeout.
func (s *Sentinel) SyncReplicas(timeout time.Duration) error {
	p, err := s.waitQuiet(timeout)
	if err != nil {
		return err
	}
	return waitReplicas(p, "redistest:sync", len(s.liveData())-1, timeout)
}

// Close kills every process and removes their directories. It may be called more than once.
func (s *Sentinel) Close() {
	s.mu.Lock()
	procs := append(slices.Clone(s.sentinels), s.data...)
	s.mu.Unlock()
	for _, p := range procs {
		p.remove()
	}
}

// pids returns the process ids of the running processes.
func (s *Sentinel) pids() []int {
	var pids []int
	for _, p := range append(s.liveSentinels(), s.liveData()...) {
		pids = append(pids, p.pid())
	}
	return pids
}

// NeedSentinel starts a Sentinel deployment that is closed when t ends. Without redis-server
// it skips t, or fails it when DLOCK_REQUIRE_REDIS=1; any other start failure fails t.
func NeedSentinel(t testing.TB, sentinels int) *Sentinel {
	t.Helper()
	s, err := StartSentinel(sentinels)
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(s.Close)
	return s
}
