package domain

import "time"

// DLockStatus is the state of a lock record, as in Java DLock.
type DLockStatus int

const (
	// StatusInitial is a record not yet written.
	StatusInitial DLockStatus = iota
	// StatusProcessing is a record held in Redis by its locker.
	StatusProcessing
)

// String returns the Java DLock name of the status.
func (s DLockStatus) String() string {
	switch s {
	case StatusInitial:
		return "INITIAL"
	case StatusProcessing:
		return "PROCESSING"
	}
	return "UNKNOWN"
}

// DLockEntity is one lock record: who holds the key (the locker, the value stored in Redis),
// its status, when it was taken and the fencing token the acquisition was given.
type DLockEntity struct {
	// Locker is the value stored under the lock key; it identifies one acquisition.
	Locker string
	// Status is StatusProcessing for a record read from or written to Redis.
	Status DLockStatus
	// LockTime is when the acquisition was sent (zero when read back from Redis).
	LockTime time.Time
	// Token is the fencing token of the acquisition (zero when unknown).
	Token uint64
	// Lease is the lease the acquiring request set, counted from LockTime (zero when unknown).
	Lease time.Duration
}
