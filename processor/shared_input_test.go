package processor_test

import (
	"context"
	"errors"
	"testing"

	dlerrors "github.com/dlockgo/dlock/errors"
	"github.com/dlockgo/dlock/processor"
)

// A take of the read-write lock or the semaphore with an empty locker is refused, as the
// mutex's Lock refuses one (processor's "empty locker"), and so are a release, renewal and
// force of one: the script keeps such a holding (and a line entry of the owner "") as any other.
func TestSharedEmptyLockerIsRefused(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc := cfg(t, "empty")
	p := newProc(t, c, "A-")
	ctx := context.Background()
	if _, err := p.Lock(ctx, lc, processor.LockRequest{Locker: ""}); !errors.Is(err, dlerrors.ErrInvalidConfig) {
		t.Fatalf("setup: the mutex's Lock with an empty locker = %v", err)
	}
	for _, s := range []processor.Shared{rw, sem3} {
		for _, wait := range []bool{false, true} {
			r, err := p.SharedTake(ctx, lc, s, processor.TakeRequest{Locker: "", N: 1, Wait: wait})
			if !errors.Is(err, dlerrors.ErrInvalidConfig) {
				t.Errorf("%s take (wait %v) with an empty locker = %+v, %v; want ErrInvalidConfig", s.Kind, wait, r, err)
			}
			_, _ = p.SharedRelease(ctx, lc, s, "")
		}
		lc = cfg(t, "empty2")
	}
}

// The processor keeps counts exactly only up to 2^53 − 1 (Lua numbers are doubles), as the
// dlock API documents and enforces (GenSemaphore, SetPermits): a count or a take above it must
// be refused (accepted, a take of 2^60 + 1 permits of a semaphore of 2^60 would be granted:
// more permits out than the count).
func TestSharedCountsAboveWhatLuaKeepsExactlyAreRefused(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc := cfg(t, "huge")
	p := newProc(t, c, "A-")
	ctx := context.Background()
	const k = int64(1) << 60
	errSet := p.SetPermits(ctx, lc, k)
	big := processor.Shared{Kind: processor.KindSem, Permits: k}
	r, errTake := p.SharedTake(ctx, lc, big, processor.TakeRequest{Locker: p.locker(), N: k + 1})
	if errTake == nil && r.Outcome == processor.Taken {
		in, _ := p.SharedInspect(ctx, lc, big)
		t.Fatalf("SetPermits(2^60) = %v, then a take of 2^60+1 permits was granted: %+v (Redis keeps %+v)", errSet, r, in)
	}
	if !errors.Is(errSet, dlerrors.ErrInvalidConfig) {
		t.Errorf("SetPermits(2^60) = %v, want ErrInvalidConfig", errSet)
	}
}
