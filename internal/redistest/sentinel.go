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

// Sentinel is a master, one replica and a set of sentinels watching them, all redis-server
// processes on loopback ports, for tests. Its methods are safe for concurrent use, though
// killing and failing over are meant to be driven by one test goroutine.
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
	s := &Sentinel{bin: bin, name: "dlockmaster"}
	if err := s.start(sentinels); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sentinel) start(sentinels int) error {
	master, err := startProc(s.bin, "master", func(dir string, port int) ([]string, error) {
		return dataArgs(dir, port), nil
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.data = append(s.data, master)
	s.mu.Unlock()
	replica, err := startProc(s.bin, "replica", func(dir string, port int) ([]string, error) {
		return append(dataArgs(dir, port), "--replicaof", "127.0.0.1", strconv.Itoa(master.port)), nil
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
		p, err := startProc(s.bin, "sentinel"+strconv.Itoa(i), func(dir string, port int) ([]string, error) {
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
	return s.waitSeen(settleTimeout)
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

// waitSeen waits until every running sentinel agrees on the master, sees it up, sees every
// running data node other than the master as a connected replica, and knows every other
// running sentinel.
func (s *Sentinel) waitSeen(timeout time.Duration) error {
	return waitFor("sentinels see master and replicas", timeout, func() error {
		master, err := s.agreedMaster()
		if err != nil {
			return err
		}
		sentinels := s.liveSentinels()
		for _, p := range sentinels {
			m, err := kv(p.do("SENTINEL", "MASTER", s.name).Result())
			if err != nil {
				return fmt.Errorf("SENTINEL MASTER on %s: %w", p.addr, err)
			}
			if m["flags"] != "master" {
				return fmt.Errorf("sentinel %s sees master %s as %s", p.addr, master, m["flags"])
			}
			if want := strconv.Itoa(len(sentinels) - 1); m["num-other-sentinels"] != want {
				return fmt.Errorf("sentinel %s knows %s other sentinels, want %s", p.addr, m["num-other-sentinels"], want)
			}
			replicas, err := p.do("SENTINEL", "REPLICAS", s.name).Slice()
			if err != nil {
				return fmt.Errorf("SENTINEL REPLICAS on %s: %w", p.addr, err)
			}
			seen := map[string]bool{}
			for _, r := range replicas {
				m, err := kv(r, nil)
				if err != nil {
					return err
				}
				if m["flags"] == "slave" && m["master-link-status"] == "ok" {
					seen[net.JoinHostPort(m["ip"], m["port"])] = true
				}
			}
			for _, d := range s.liveData() {
				if d.addr != master && !seen[d.addr] {
					return fmt.Errorf("sentinel %s does not see replica %s connected", p.addr, d.addr)
				}
			}
		}
		return nil
	})
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

// KillMaster kills (SIGKILL) the current master and returns its address. RestartKilled brings
// it back as a replica.
func (s *Sentinel) KillMaster() (string, error) {
	addr, err := s.MasterAddr()
	if err != nil {
		return "", err
	}
	p := s.dataByAddr(addr)
	if p == nil || !p.running() {
		return "", fmt.Errorf("redistest: master %s is not a running node of this deployment", addr)
	}
	p.kill()
	return addr, nil
}

// Failover asks a sentinel for a failover (SENTINEL FAILOVER), retrying while the sentinel has
// no replica it considers good or a failover is in progress, and returns the master's address
// before it; WaitNewMaster waits for the result. The old master stays up: it becomes a replica.
func (s *Sentinel) Failover() (string, error) {
	old, err := s.agreedMaster()
	if err != nil {
		return "", err
	}
	return old, waitFor("SENTINEL FAILOVER "+s.name, settleTimeout, func() error {
		sentinels := s.liveSentinels()
		if len(sentinels) == 0 {
			return fmt.Errorf("no sentinel running")
		}
		return sentinels[0].do("SENTINEL", "FAILOVER", s.name).Err()
	})
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

// RestartKilled starts every killed data node again, empty, as a replica of the current
// master, and waits until the sentinels see it as a connected replica.
func (s *Sentinel) RestartKilled() error {
	master, err := s.agreedMaster()
	if err != nil {
		return err
	}
	p := s.dataByAddr(master)
	if p == nil || !p.running() {
		return fmt.Errorf("redistest: the sentinels name %s, which is not running", master)
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
		if err := waitFor("restarted "+d.addr+" synced", settleTimeout, func() error {
			return replicaOf(d, p.port)
		}); err != nil {
			return err
		}
	}
	return s.waitSeen(settleTimeout)
}

// SyncReplicas makes sure every write made so far to the master has reached its connected
// replicas: it writes a marker key and runs WAIT on that connection.
func (s *Sentinel) SyncReplicas(timeout time.Duration) error {
	master, err := s.MasterAddr()
	if err != nil {
		return err
	}
	p := s.dataByAddr(master)
	if p == nil || !p.running() {
		return fmt.Errorf("redistest: master %s is not running", master)
	}
	repl, err := p.info("INFO", "replication")
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(repl["connected_slaves"])
	return waitReplicas(p, "redistest:sync", n, timeout)
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
