package queue_test

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkLocalLock compares the lock-free CLH queue with the mutex-and-list reference as the
// waiting part of a local lock: each goroutine locks, does a little work, unlocks.
func BenchmarkLocalLock(b *testing.B) {
	for _, impl := range []struct {
		name string
		new  func() locker
	}{
		{"clh", func() locker { return &clhLock{} }},
		{"clh-fifo", func() locker { return &clhLock{fifo: true} }},
		{"mutex-list", func() locker { return &listLock{} }},
	} {
		for _, p := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/parallelism=%d", impl.name, p), func(b *testing.B) {
				l := impl.new()
				ctx := context.Background()
				b.SetParallelism(p)
				b.RunParallel(func(pb *testing.PB) {
					x := 0
					for pb.Next() {
						if err := l.Lock(ctx); err != nil {
							b.Error(err)
							return
						}
						for i := 0; i < 50; i++ { // a short critical section
							x += i
						}
						l.Unlock()
					}
					_ = x
				})
			})
		}
	}
}
