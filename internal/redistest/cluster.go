package redistest

import (
	"errors"
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

	"github.com/dlockgo/dlock/domain"
)

// ClusterNodeTimeout is the cluster-node-timeout of a started Cluster: a master that does not
// answer for this long is failed over by its replica, so failovers take a few seconds.
const ClusterNodeTimeout = 1000 * time.Millisecond

// Cluster is a Redis Cluster of redis-server processes on loopback ports, for tests: masters
// share the 16384 slots evenly, each has its replicas, nothing is persisted. Its methods are
// safe for concurrent use, though killing and failing over are meant to be driven by one test
// goroutine.
type Cluster struct {
	bin string

	masters  int
	replicas int

	mu    sync.Mutex
	nodes []*proc // all nodes, in start order: masters first; guarded by mu
}

// StartCluster starts masters*(1+replicasPerMaster) redis-servers with --cluster-enabled yes,
// gives each master its share of the slots, makes the replicas replicate, and returns when
// every node says cluster_state:ok and knows every other node, and every replica is connected
// and synced. It returns an error wrapping ErrNoRedisServer when there is no redis-server.
func StartCluster(masters, replicasPerMaster int) (*Cluster, error) {
	if masters < 1 || replicasPerMaster < 0 {
		return nil, fmt.Errorf("redistest: StartCluster(%d, %d): need a master", masters, replicasPerMaster)
	}
	bin, err := redisServer()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, masters: masters, replicas: replicasPerMaster}
	if err := c.start(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start() error {
	total := c.masters * (1 + c.replicas)
	for i := range total {
		p, err := startProc(c.bin, "cluster"+strconv.Itoa(i), 2, func(dir string, ports []int) ([]string, error) {
			return append(dataArgs(dir, ports[0]), "--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout/time.Millisecond)),
				"--cluster-port", strconv.Itoa(ports[1]),
				// a replica fails over however long it was cut off from its master
				"--cluster-replica-validity-factor", "0"), nil
		})
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.nodes = append(c.nodes, p)
		c.mu.Unlock()
	}
	for _, p := range c.nodes {
		id, err := p.do("CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("redistest: CLUSTER MYID on %s: %w", p.addr, err)
		}
		p.id = id
	}
	for i := range c.masters {
		p := c.nodes[i]
		lo, hi := i*16384/c.masters, (i+1)*16384/c.masters-1
		if err := p.do("CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER SET-CONFIG-EPOCH on %s: %w", p.addr, err)
		}
		if err := p.do("CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE on %s: %w", p.addr, err)
		}
	}
	first := c.nodes[0]
	for _, p := range c.nodes[1:] {
		bus := busPort(p)
		if err := first.do("CLUSTER", "MEET", "127.0.0.1", p.port, bus).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET %s: %w", p.addr, err)
		}
	}
	if err := waitFor("cluster nodes meet", settleTimeout, func() error {
		for _, p := range c.nodes {
			view, err := p.view()
			if err != nil {
				return err
			}
			if len(view) != total {
				return fmt.Errorf("%s knows %d of %d nodes", p.addr, len(view), total)
			}
			for _, n := range view {
				if n.has("handshake") || n.has("noaddr") {
					return fmt.Errorf("%s sees %s as %s", p.addr, n.addr, strings.Join(n.flags, ","))
				}
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for i := c.masters; i < total; i++ {
		p, m := c.nodes[i], c.nodes[(i-c.masters)%c.masters]
		if err := waitFor("CLUSTER REPLICATE on "+p.addr, settleTimeout, func() error {
			return p.do("CLUSTER", "REPLICATE", m.id).Err()
		}); err != nil {
			return err
		}
	}
	return c.waitHealthy(settleTimeout)
}

// busPort returns the cluster bus port a node was started with.
func busPort(p *proc) string {
	i := slices.Index(p.args, "--cluster-port")
	return p.args[i+1]
}

// waitHealthy waits until every running node says cluster_state:ok with all slots served,
// every replica is connected to its master and synced, and every running node sees every
// running node healthy and in its actual role (a replica as the replica of its master).
func (c *Cluster) waitHealthy(timeout time.Duration) error {
	return waitFor("cluster healthy", timeout, func() error {
		live := c.live()
		masterOf := map[*proc]string{} // replica -> its master's id; "" for a master
		for _, p := range live {
			if err := clusterOK(p, len(c.all())); err != nil {
				return err
			}
			repl, err := p.info("INFO", "replication")
			if err != nil {
				return err
			}
			masterOf[p] = ""
			if repl["role"] == "slave" {
				if repl["master_link_status"] != "up" || repl["master_sync_in_progress"] != "0" {
					return fmt.Errorf("replica %s: link %s, sync in progress %s", p.addr, repl["master_link_status"], repl["master_sync_in_progress"])
				}
				m := c.byAddr(net.JoinHostPort(repl["master_host"], repl["master_port"]))
				if m == nil {
					return fmt.Errorf("replica %s replicates from %s:%s, not a node of this cluster", p.addr, repl["master_host"], repl["master_port"])
				}
				masterOf[p] = m.id
			}
		}
		slaves := 0
		for _, q := range live {
			if masterOf[q] != "" {
				slaves++
			}
		}
		if want := len(live) - c.masters; slaves != want {
			return fmt.Errorf("%d replicas, want %d", slaves, want)
		}
		for _, p := range live {
			view, err := p.view()
			if err != nil {
				return err
			}
			for _, q := range live {
				n := view.byAddr(q.addr)
				switch {
				case n == nil:
					return fmt.Errorf("%s does not know %s", p.addr, q.addr)
				case n.has("fail") || n.has("fail?") || n.has("handshake"):
					return fmt.Errorf("%s sees %s as %s", p.addr, q.addr, strings.Join(n.flags, ","))
				case masterOf[q] == "" && !n.has("master"):
					return fmt.Errorf("%s does not see master %s as a master yet", p.addr, q.addr)
				case masterOf[q] != "" && (!n.has("slave") || n.master != masterOf[q]):
					return fmt.Errorf("%s does not see replica %s as the replica of its master yet", p.addr, q.addr)
				}
			}
		}
		return nil
	})
}

// clusterOK checks one node's CLUSTER INFO: state ok, all slots served, all nodes known.
func clusterOK(p *proc, nodes int) error {
	info, err := p.info("CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != "16384" {
		return fmt.Errorf("%s: cluster_state:%s cluster_slots_ok:%s cluster_slots_pfail:%s cluster_slots_fail:%s",
			p.addr, info["cluster_state"], info["cluster_slots_ok"], info["cluster_slots_pfail"], info["cluster_slots_fail"])
	}
	if info["cluster_known_nodes"] != strconv.Itoa(nodes) {
		return fmt.Errorf("%s knows %s of %d nodes", p.addr, info["cluster_known_nodes"], nodes)
	}
	return nil
}

func (c *Cluster) all() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

func (c *Cluster) live() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var live []*proc
	for _, p := range c.nodes {
		if p.running() {
			live = append(live, p)
		}
	}
	return live
}

func (c *Cluster) byAddr(addr string) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.nodes {
		if p.addr == addr {
			return p
		}
	}
	return nil
}

// Addrs returns the host:port of every node, killed ones included (a client given them as
// seeds finds the live ones).
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, p := range c.all() {
		addrs = append(addrs, p.addr)
	}
	return addrs
}

// Client returns a new cluster client seeded with every node, with go-redis's defaults
// changed only by tune; the caller closes it.
func (c *Cluster) Client(tune ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	opt := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, f := range tune {
		f(opt)
	}
	return redis.NewClusterClient(opt)
}

// MasterFor returns the address of the master that serves key's slot, as the running nodes see
// it (the view with the highest config epoch wins while they disagree); "" if none answers.
// Right after a master is killed it is still that master.
func (c *Cluster) MasterFor(key string) string {
	owner, _ := c.owner(domain.Slot(key))
	return owner
}

// owner returns the master of slot in the newest view of the running nodes, and whether all
// running nodes that answered agree on it and none of them sees it as failing.
func (c *Cluster) owner(slot int) (string, bool) {
	best, bestEpoch, agree := "", int64(-1), true
	for _, p := range c.live() {
		view, err := p.view()
		if err != nil {
			continue
		}
		n := view.master(slot)
		if n == nil {
			agree = false
			continue
		}
		if n.has("fail") || n.has("fail?") {
			agree = false
		}
		if best != "" && n.addr != best {
			agree = false
		}
		if n.epoch > bestEpoch {
			best, bestEpoch = n.addr, n.epoch
		}
	}
	return best, agree && best != ""
}

// KillMaster kills (SIGKILL) the master that serves key's slot and returns its address. The
// node keeps its directory, so RestartKilled can bring it back.
func (c *Cluster) KillMaster(key string) (string, error) {
	addr := c.MasterFor(key)
	p := c.byAddr(addr)
	if p == nil || !p.running() {
		return "", fmt.Errorf("redistest: no running master for %q (slot %d; view says %q)", key, domain.Slot(key), addr)
	}
	p.kill()
	return addr, nil
}

// WaitFailover waits until key's slot is served by a running master that every running node
// agrees on and none sees as failing, with cluster_state:ok on every running node, and returns
// that master's address. Use it after KillMaster: it returns when a replica has been promoted.
func (c *Cluster) WaitFailover(key string, timeout time.Duration) (string, error) {
	slot := domain.Slot(key)
	var addr string
	err := waitFor(fmt.Sprintf("failover of slot %d", slot), timeout, func() error {
		owner, agree := c.owner(slot)
		p := c.byAddr(owner)
		switch {
		case p == nil || !p.running():
			return fmt.Errorf("slot %d still on %q, which is not running", slot, owner)
		case !agree:
			return fmt.Errorf("nodes do not agree yet on the master of slot %d (newest view: %s)", slot, owner)
		}
		for _, q := range c.live() {
			info, err := q.info("CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if info["cluster_state"] != "ok" {
				return fmt.Errorf("%s: cluster_state:%s", q.addr, info["cluster_state"])
			}
		}
		if repl, err := p.info("INFO", "replication"); err != nil || repl["role"] != "master" {
			return fmt.Errorf("new master %s not yet master (%v)", owner, err)
		}
		addr = owner
		return nil
	})
	return addr, err
}

// FailoverReplica runs a manual CLUSTER FAILOVER (no data loss: the replica catches up with
// its master first) on a connected replica of the master serving key's slot, and waits until
// the replica serves the slot in every running node's view and the old master replicates
// from it. It returns the new master's address.
func (c *Cluster) FailoverReplica(key string) (string, error) {
	slot := domain.Slot(key)
	old := c.byAddr(c.MasterFor(key))
	if old == nil || !old.running() {
		return "", fmt.Errorf("redistest: no running master for slot %d", slot)
	}
	var replica *proc
	if err := waitFor(fmt.Sprintf("a replica of %s", old.addr), settleTimeout, func() error {
		view, err := old.view()
		if err != nil {
			return err
		}
		for _, n := range view {
			if n.master != old.id || n.has("fail") || n.has("fail?") {
				continue
			}
			if p := c.byAddr(n.addr); p != nil && p.running() {
				replica = p
				return nil
			}
		}
		return fmt.Errorf("master %s of slot %d has no running replica", old.addr, slot)
	}); err != nil {
		return "", err
	}
	sent := time.Time{}
	err := waitFor(fmt.Sprintf("CLUSTER FAILOVER of slot %d to %s", slot, replica.addr), settleTimeout, func() error {
		owner, agree := c.owner(slot)
		if owner != replica.addr {
			// A manual failover that did not happen within its own timeout is asked again.
			if time.Since(sent) > 3*ClusterNodeTimeout+5*time.Second {
				if err := replica.do("CLUSTER", "FAILOVER").Err(); err != nil {
					return fmt.Errorf("CLUSTER FAILOVER on %s: %w", replica.addr, err)
				}
				sent = time.Now()
			}
			return fmt.Errorf("slot %d still on %s", slot, owner)
		}
		if !agree {
			return fmt.Errorf("nodes do not agree yet on the master of slot %d", slot)
		}
		repl, err := old.info("INFO", "replication")
		if err != nil {
			return err
		}
		if repl["role"] != "slave" || repl["master_link_status"] != "up" || repl["master_port"] != strconv.Itoa(replica.port) {
			return fmt.Errorf("old master %s: role %s, link %s, master port %s", old.addr, repl["role"], repl["master_link_status"], repl["master_port"])
		}
		for _, q := range c.live() {
			if err := clusterOK(q, len(c.all())); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return replica.addr, nil
}

// RestartKilled starts every killed node again, empty, on its old ports and with its old
// nodes.conf: it rejoins as a replica of the master that took its slots. It returns when the
// cluster is healthy again.
func (c *Cluster) RestartKilled() error {
	for _, p := range c.all() {
		if p.running() {
			continue
		}
		if err := p.start(); err != nil {
			return fmt.Errorf("redistest: restart %s: %w", p.addr, err)
		}
	}
	return c.waitHealthy(settleTimeout)
}

// Close kills every node and removes their directories. It may be called more than once.
func (c *Cluster) Close() {
	for _, p := range c.all() {
		p.remove()
	}
}

// pids returns the process ids of the running nodes.
func (c *Cluster) pids() []int {
	var pids []int
	for _, p := range c.live() {
		pids = append(pids, p.pid())
	}
	return pids
}

// NeedCluster starts a Cluster that is closed when t ends. Without redis-server it skips t,
// or fails it when DLOCK_REQUIRE_REDIS=1; any other start failure fails t.
func NeedCluster(t testing.TB, masters, replicasPerMaster int) *Cluster {
	t.Helper()
	c, err := StartCluster(masters, replicasPerMaster)
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(c.Close)
	return c
}

func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoRedisServer) && !Required() {
		t.Skipf("needs redis-server: %v", err)
	}
	t.Fatal(err)
}

// nodeLine is one line of CLUSTER NODES.
type nodeLine struct {
	id     string
	addr   string // host:port
	flags  []string
	master string // the master's id for a replica, else ""
	epoch  int64
	slots  [][2]int // inclusive ranges
}

func (n *nodeLine) has(flag string) bool { return slices.Contains(n.flags, flag) }

type clusterView []nodeLine

func (p *proc) view() (clusterView, error) {
	s, err := p.do("CLUSTER", "NODES").Text()
	if err != nil {
		return nil, err
	}
	return parseNodes(s)
}

// parseNodes parses CLUSTER NODES: <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
// <pong-recv> <config-epoch> <link-state> <slot>...
func parseNodes(s string) (clusterView, error) {
	var view clusterView
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("redistest: CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := nodeLine{id: f[0], addr: addr, flags: strings.Split(f[2], ",")}
		if f[3] != "-" {
			n.master = f[3]
		}
		n.epoch, _ = strconv.ParseInt(f[6], 10, 64)
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated
			}
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("redistest: CLUSTER NODES slots %q", r)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		view = append(view, n)
	}
	return view, nil
}

func (v clusterView) byAddr(addr string) *nodeLine {
	for i := range v {
		if v[i].addr == addr {
			return &v[i]
		}
	}
	return nil
}

// master returns the master serving slot in this view, or nil.
func (v clusterView) master(slot int) *nodeLine {
	for i := range v {
		if !v[i].has("master") {
			continue
		}
		for _, r := range v[i].slots {
			if r[0] <= slot && slot <= r[1] {
				return &v[i]
			}
		}
	}
	return nil
}

// SyncReplicas makes sure every write made so far to the master serving key's slot has reached
// its replicas: it writes a marker key in the same slot and runs WAIT on that connection.
func (c *Cluster) SyncReplicas(key string, timeout time.Duration) error {
	p := c.byAddr(c.MasterFor(key))
	if p == nil || !p.running() {
		return fmt.Errorf("redistest: no running master for %q", key)
	}
	view, err := p.view()
	if err != nil {
		return err
	}
	replicas := 0
	for _, n := range view {
		if n.master == p.id && !n.has("fail") {
			replicas++
		}
	}
	tag := key
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			tag = key[i+1 : i+1+j]
		}
	}
	return waitReplicas(p, "{"+tag+"}:redistest:sync", replicas, timeout)
}

// waitReplicas writes marker on p and waits, on the same connection, until replicas replicas
// acknowledged it (and so every write before it).
func waitReplicas(p *proc, marker string, replicas int, timeout time.Duration) error {
	ctx, cancel := contextFor(timeout + 5*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: p.addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		ReadTimeout: timeout + 5*time.Second})
	defer c.Close()
	conn := c.Conn()
	defer conn.Close()
	if err := conn.Set(ctx, marker, strconv.Itoa(os.Getpid()), time.Minute).Err(); err != nil {
		return fmt.Errorf("redistest: write marker on %s: %w", p.addr, err)
	}
	n, err := conn.Do(ctx, "WAIT", replicas, timeout.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("redistest: WAIT on %s: %w", p.addr, err)
	}
	if n < replicas {
		return fmt.Errorf("redistest: WAIT on %s: %d of %d replicas acknowledged within %v", p.addr, n, replicas, timeout)
	}
	return nil
}

// Migration is a slot being moved from one master to another (BeginMigration): the source
// says MIGRATING, the target IMPORTING, and no key has moved yet.
type Migration struct {
	c        *Cluster
	slot     int
	from, to *proc
}

// BeginMigration starts moving key's slot from its master to another master (the first
// running one that does not serve it): CLUSTER SETSLOT IMPORTING on the target, MIGRATING on
// the source. Finish moves the keys and the slot.
func (c *Cluster) BeginMigration(key string) (*Migration, error) {
	slot := domain.Slot(key)
	from := c.byAddr(c.MasterFor(key))
	if from == nil || !from.running() {
		return nil, fmt.Errorf("redistest: no running master for slot %d", slot)
	}
	view, err := from.view()
	if err != nil {
		return nil, err
	}
	var to *proc
	for _, n := range view {
		if n.has("master") && n.addr != from.addr && len(n.slots) > 0 {
			if p := c.byAddr(n.addr); p != nil && p.running() {
				to = p
				break
			}
		}
	}
	if to == nil {
		return nil, fmt.Errorf("redistest: no other master to move slot %d to", slot)
	}
	if err := to.do("CLUSTER", "SETSLOT", slot, "IMPORTING", from.id).Err(); err != nil {
		return nil, fmt.Errorf("redistest: SETSLOT IMPORTING on %s: %w", to.addr, err)
	}
	if err := from.do("CLUSTER", "SETSLOT", slot, "MIGRATING", to.id).Err(); err != nil {
		return nil, fmt.Errorf("redistest: SETSLOT MIGRATING on %s: %w", from.addr, err)
	}
	return &Migration{c: c, slot: slot, from: from, to: to}, nil
}

// From is the address of the slot's source master.
func (m *Migration) From() string { return m.from.addr }

// To is the address of the slot's target master.
func (m *Migration) To() string { return m.to.addr }

// MoveKeys migrates the keys the source still has in the slot to the target (MIGRATE).
func (m *Migration) MoveKeys() error {
	for {
		keys, err := m.from.do("CLUSTER", "GETKEYSINSLOT", m.slot, 100).StringSlice()
		if err != nil {
			return fmt.Errorf("redistest: GETKEYSINSLOT on %s: %w", m.from.addr, err)
		}
		if len(keys) == 0 {
			return nil
		}
		args := []any{"MIGRATE", "127.0.0.1", m.to.port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := m.from.do(args...).Err(); err != nil {
			return fmt.Errorf("redistest: MIGRATE on %s: %w", m.from.addr, err)
		}
	}
}

// Finish moves the remaining keys, gives the slot to the target (CLUSTER SETSLOT NODE on the
// target, the source, then the other masters, as redis-cli --cluster reshard does) and waits
// until every running node agrees that the target serves it.
func (m *Migration) Finish() error {
	if err := m.MoveKeys(); err != nil {
		return err
	}
	for _, p := range []*proc{m.to, m.from} {
		if err := p.do("CLUSTER", "SETSLOT", m.slot, "NODE", m.to.id).Err(); err != nil {
			return fmt.Errorf("redistest: SETSLOT NODE on %s: %w", p.addr, err)
		}
	}
	for _, p := range m.c.live() {
		if p == m.to || p == m.from {
			continue
		}
		if repl, err := p.info("INFO", "replication"); err == nil && repl["role"] == "master" {
			_ = p.do("CLUSTER", "SETSLOT", m.slot, "NODE", m.to.id).Err() // gossip tells it otherwise
		}
	}
	return waitFor(fmt.Sprintf("slot %d on %s", m.slot, m.to.addr), settleTimeout, func() error {
		owner, agree := m.c.owner(m.slot)
		if owner != m.to.addr || !agree {
			return fmt.Errorf("slot %d: newest view %s (agreed %v)", m.slot, owner, agree)
		}
		return nil
	})
}
