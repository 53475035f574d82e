package dlock

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dlockgo/dlock/domain"
)

// ParseLeases reads lock-type leases in the format of Java DLock's config-dlock.properties:
// one TYPE=millis per line (':' may stand for '='), blank lines and lines starting with '#' or
// '!' ignored. Every type and lease is validated; an error names the line.
func ParseLeases(r io.Reader) (map[string]time.Duration, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil reader", ErrInvalidConfig)
	}
	leases := make(map[string]time.Duration)
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' || text[0] == '!' {
			continue
		}
		i := strings.IndexAny(text, "=:")
		if i < 0 {
			return nil, fmt.Errorf("%w: line %d: want TYPE=millis, got %q", ErrInvalidConfig, line, text)
		}
		typ, val := strings.TrimSpace(text[:i]), strings.TrimSpace(text[i+1:])
		if err := domain.ValidateType(domain.DLockType(typ)); err != nil {
			return nil, atLine(line, err)
		}
		ms, err := strconv.ParseInt(val, 10, 64)
		if err != nil || ms <= 0 || ms > int64(domain.MaxLease/time.Millisecond) {
			return nil, fmt.Errorf("%w: line %d: lease %q is not a positive number of milliseconds up to %d", ErrInvalidConfig, line, val, domain.MaxLease/time.Millisecond)
		}
		d := time.Duration(ms) * time.Millisecond
		if err := domain.ValidateLease(d); err != nil {
			return nil, atLine(line, err)
		}
		if _, dup := leases[typ]; dup {
			return nil, fmt.Errorf("%w: line %d: type %s given twice", ErrInvalidConfig, line, typ)
		}
		leases[typ] = d
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading leases: %w", ErrInvalidConfig, err)
	}
	return leases, nil
}

// atLine returns err, an ErrInvalidConfig from package domain, naming the line: the prefix
// stays at the start of the message ("dlock: invalid configuration: line 3: blank lock
// type"), as in ParseLeases's other errors, rather than after the line number.
func atLine(line int, err error) error {
	msg := strings.TrimPrefix(err.Error(), ErrInvalidConfig.Error()+": ")
	return fmt.Errorf("%w: line %d: %s", ErrInvalidConfig, line, msg)
}

// LoadLeases reads a config-dlock.properties file with ParseLeases.
func LoadLeases(path string) (map[string]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	defer f.Close()
	return ParseLeases(f)
}
