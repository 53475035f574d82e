package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

func Example() {
	m, _ := miniredis.Run() // any Redis will do; miniredis keeps the example self-contained
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()

	gen, err := dlock.NewGenerator(client, dlock.WithLeases(map[string]time.Duration{"ORDER": 30 * time.Second}))
	if err != nil {
		panic(err)
	}
	defer gen.Close(context.Background())

	lock, err := gen.Gen("ORDER", "42")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	owned, err := lock.Lock(ctx) // owned ends if the lock is lost
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", lock.Config().UniqueKey())
	if _, err := lock.Lock(owned); err == nil { // re-entry with the owner context
		fmt.Println("hold count", lock.HoldCount(owned))
	}
	lock.Unlock(owned) // hold count back to 1
	if err := lock.Unlock(owned); err == nil {
		fmt.Println("released")
	}
	fmt.Println(errors.Is(lock.Unlock(owned), dlock.ErrNotHeld))
	// Output:
	// holding DLOCK_ORDER_42
	// hold count 2
	// released
	// true
}

// store is a downstream store that honours fencing tokens: it rejects a write whose token is
// lower than the last one it accepted.
type store struct {
	mu        sync.Mutex
	lastToken uint64
	value     string
}

func (s *store) Write(token uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.lastToken {
		return fmt.Errorf("stale token %d < %d", token, s.lastToken)
	}
	s.lastToken, s.value = token, value
	return nil
}

// A holder that stalls past its lease (a GC pause, a stopped VM) may still believe it holds the
// lock. Its fencing token lets the store reject its late write.
func ExampleDistributedReentrantLock_FencingToken() {
	m, _ := miniredis.Run()
	defer m.Close()
	db := &store{}
	var closers []func()
	defer func() {
		for _, f := range closers {
			f()
		}
	}()
	server := func(lease time.Duration) *dlock.DistributedReentrantLock { // one process
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		g, _ := dlock.NewGenerator(c)
		l, _ := g.GenWithLease("ORDER", "42", lease)
		closers = append(closers, func() { g.Close(context.Background()); c.Close() })
		return l
	}
	a, b := server(100*time.Millisecond), server(5*time.Second)
	ctx := context.Background()

	ownedA, _ := a.Lock(ctx)
	tokenA, _ := a.FencingToken(ownedA)
	m.FastForward(time.Second) // A stalls: its lease runs out before it can renew

	ownedB, _ := b.Lock(ctx)
	tokenB, _ := b.FencingToken(ownedB)
	fmt.Println("B writes:", db.Write(tokenB, "from B"))
	fmt.Println("A writes late:", db.Write(tokenA, "from A") != nil)

	<-ownedA.Done() // A's next renewal finds the key taken
	fmt.Println("A's context:", errors.Is(context.Cause(ownedA), dlock.ErrLockLost))
	fmt.Println("A's unlock:", errors.Is(a.Unlock(ownedA), dlock.ErrLockLost))
	fmt.Println("B's unlock:", b.Unlock(ownedB))
	fmt.Println("store holds:", db.value)
	// Output:
	// B writes: <nil>
	// A writes late: true
	// A's context: true
	// A's unlock: true
	// B's unlock: <nil>
	// store holds: from B
}

// A transfer needs both accounts or neither. The MultiLock takes them in one global order, so
// a transfer the other way, anywhere, cannot deadlock with this one.
func ExampleMultiLock() {
	m, _ := miniredis.Run()
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	gen, err := dlock.NewGenerator(client, dlock.WithLeases(map[string]time.Duration{"ACCOUNT": 10 * time.Second}))
	if err != nil {
		panic(err)
	}
	defer gen.Close(context.Background())

	from, err := gen.Gen("ACCOUNT", "7")
	if err != nil {
		panic(err)
	}
	to, err := gen.Gen("ACCOUNT", "42")
	if err != nil {
		panic(err)
	}
	both, err := gen.Multi(from, to)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = both.Do(ctx, func(owned context.Context) error {
		tokens, _ := both.FencingTokens(owned) // one per account, for the ledger's writes
		fmt.Println("holding", len(tokens), "accounts")
		return nil
	})
	fmt.Println("released:", err == nil)
	// Output:
	// holding 2 accounts
	// released: true
}

func ExampleRWLock() {
	m, _ := miniredis.Run()
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	gen, err := dlock.NewGenerator(client, dlock.WithDefaultLease(30*time.Second))
	if err != nil {
		panic(err)
	}
	defer gen.Close(context.Background())

	config, err := gen.GenRW("CONFIG", "pricing")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	r1, _ := config.RLock(ctx) // readers share: these two cost one Redis request
	r2, _ := config.RLock(ctx)
	st, _ := config.State(ctx)
	fmt.Println("read-holds in Redis:", len(st.Readers()))
	_ = r1.Unlock()
	_ = r2.Unlock()

	w, _ := config.Lock(ctx) // the write side: nobody else reads or writes
	r, _ := config.RLock(w)  // a downgrade: read on after the write
	_ = w.Unlock()
	_, err = config.Lock(r) // asking to write with only the read side would deadlock
	fmt.Println(errors.Is(err, dlock.ErrUpgrade))
	_ = r.Unlock()
	// Output:
	// read-holds in Redis: 1
	// true
}

func ExampleSemaphore() {
	m, _ := miniredis.Run()
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	gen, err := dlock.NewGenerator(client, dlock.WithDefaultLease(30*time.Second))
	if err != nil {
		panic(err)
	}
	defer gen.Close(context.Background())

	exports, err := gen.GenSemaphore("EXPORT", "reports", 4) // at most 4 exports at once, fleet-wide
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	big, _ := exports.Acquire(ctx, 3)
	if _, ok, _ := exports.TryAcquire(ctx, 2); !ok {
		fmt.Println("2 more permits: not now")
	}
	small, _ := exports.Acquire(ctx, 1)
	st, _ := exports.State(ctx)
	fmt.Println("permits:", st.Permits)
	_ = small.Unlock()
	_ = big.Unlock()
	// Output:
	// 2 more permits: not now
	// permits: 4
}
