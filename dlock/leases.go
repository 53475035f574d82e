package dlock

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dlockgo/dlock/domain"
)

// ParseLeases reads lock-type leases in the format of Java DLock's config-dlock.properties,
// which DLock reads with java.util.Properties: one entry TYPE=millis per line. As Properties
// does, the separator may be '=', ':' or white space (TYPE 500), with white space around it;
// lines blank or starting with '#' or '!' (after white space) are comments; a line ending in an
// odd number of backslashes continues on the next (its leading white space dropped), a comment
// excepted; \uXXXX, \t, \n, \r, \f and a backslash before any other character (\=, \:, \#) are
// escapes; lines end at LF, CR or CRLF. It differs where Properties would take what DLock then
// fails on or silently drops: the input is UTF-8 (Properties reads ISO-8859-1: \uXXXX means the
// same in both), a byte-order mark that starts it is skipped, a type given twice is an error
// (not the last one kept), white space after a lease is ignored, and every type and lease is
// validated. An error names the line its entry starts on and why; a line longer than 1 MiB is
// refused. Every error wraps ErrInvalidConfig (and the reader's own, when reading failed); a nil
// reader is one.
func ParseLeases(r io.Reader) (map[string]time.Duration, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil reader", ErrInvalidConfig)
	}
	leases := make(map[string]time.Duration)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLeasesLine)
	sc.Split(scanPropertiesLines)
	var (
		entry strings.Builder // the logical line being read
		first int             // the line it starts on
		cont  bool            // the last line continues on this one
		line  int
	)
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			text = strings.TrimPrefix(text, "\ufeff") // a byte-order mark, as editors on Windows write
		}
		text = strings.TrimLeft(text, propertiesSpace)
		if !cont {
			if text == "" || text[0] == '#' || text[0] == '!' {
				continue
			}
			entry.Reset()
			first = line
		}
		n := len(text) - len(strings.TrimRight(text, `\`))
		if cont = n%2 == 1; cont {
			entry.WriteString(text[:len(text)-1])
			continue
		}
		entry.WriteString(text)
		if err := addLease(leases, entry.String(), first); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("%w: line %d: longer than %d bytes", ErrInvalidConfig, line+1, maxLeasesLine)
	} else if err != nil {
		return nil, fmt.Errorf("%w: reading leases: %w", ErrInvalidConfig, err)
	}
	if cont { // the input ended in a continued line: the entry ends there (as in Properties)
		if err := addLease(leases, entry.String(), first); err != nil {
			return nil, err
		}
	}
	return leases, nil
}

// maxLeasesLine bounds a line of ParseLeases's input.
const maxLeasesLine = 1 << 20

// propertiesSpace is the white space of java.util.Properties: space, tab and form feed.
const propertiesSpace = " \t\f"

// scanPropertiesLines is a bufio.SplitFunc for lines ended by LF, CR or CRLF.
func scanPropertiesLines(data []byte, atEOF bool) (int, []byte, error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		switch {
		case data[i] == '\n':
			return i + 1, data[:i], nil
		case i+1 < len(data) && data[i+1] == '\n':
			return i + 2, data[:i], nil
		case i+1 < len(data) || atEOF:
			return i + 1, data[:i], nil
		}
		return 0, nil, nil // a CR last: an LF may follow
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// addLease adds the entry of a logical line (its line continuations joined), the line it
// starts on being line, to leases.
func addLease(leases map[string]time.Duration, entry string, line int) error {
	// The key ends at the first '=', ':' or white space not escaped; then white space, one
	// '=' or ':', and white space again separate it from the value.
	i := 0
	for i < len(entry) && !strings.ContainsRune("=:"+propertiesSpace, rune(entry[i])) {
		if entry[i] == '\\' {
			i++
		}
		i++
	}
	i = min(i, len(entry))
	key, val := entry[:i], strings.TrimLeft(entry[i:], propertiesSpace)
	if val != "" && (val[0] == '=' || val[0] == ':') {
		val = strings.TrimLeft(val[1:], propertiesSpace)
	}
	typ, err := unescapeProperty(key)
	if err == nil {
		val, err = unescapeProperty(val)
	}
	if err != nil {
		return fmt.Errorf("%w: line %d: %v", ErrInvalidConfig, line, err)
	}
	if err := domain.ValidateType(domain.DLockType(typ)); err != nil {
		return atLine(line, err)
	}
	val = strings.TrimSpace(val)
	ms, err := strconv.ParseInt(val, 10, 64)
	if err != nil || ms <= 0 || ms > int64(domain.MaxLease/time.Millisecond) {
		return fmt.Errorf("%w: line %d: lease %q of type %s is not a positive number of milliseconds up to %d (want TYPE=millis)",
			ErrInvalidConfig, line, val, typ, domain.MaxLease/time.Millisecond)
	}
	d := time.Duration(ms) * time.Millisecond
	if err := domain.ValidateLease(d); err != nil {
		return atLine(line, err)
	}
	if _, dup := leases[typ]; dup {
		return fmt.Errorf("%w: line %d: type %s given twice", ErrInvalidConfig, line, typ)
	}
	leases[typ] = d
	return nil
}

// unescapeProperty undoes the escapes of java.util.Properties: \uXXXX (UTF-16, surrogate pairs
// joined), \t, \n, \r, \f, and a backslash before any other character, which stands for it.
func unescapeProperty(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i++; i == len(s) {
			break // a backslash last: dropped, as Properties does
		}
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			r, n, err := unicodeEscape(s[i-1:])
			if err != nil {
				return "", err
			}
			b.WriteRune(r)
			i += n - 2
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), nil
}

// unicodeEscape decodes the \uXXXX escape s starts with, and a second one that completes a
// surrogate pair, returning the rune and the bytes read.
func unicodeEscape(s string) (rune, int, error) {
	hex4 := func(s string) (rune, bool) {
		if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(s[2:6], 16, 16)
		return rune(v), err == nil
	}
	r, ok := hex4(s)
	if !ok {
		return 0, 0, fmt.Errorf("malformed \\uXXXX escape %q", s[:min(len(s), 6)])
	}
	if !utf16.IsSurrogate(r) {
		return r, 6, nil
	}
	if lo, ok := hex4(s[6:]); ok {
		if r := utf16.DecodeRune(r, lo); r != utf8.RuneError {
			return r, 12, nil
		}
	}
	return 0, 0, fmt.Errorf("\\u%04X is half of a surrogate pair without its other half", r)
}

// atLine returns err, an ErrInvalidConfig from package domain, naming the line: the prefix
// stays at the start of the message ("dlock: invalid configuration: line 3: blank lock
// type"), as in ParseLeases's other errors, rather than after the line number.
func atLine(line int, err error) error {
	msg := strings.TrimPrefix(err.Error(), ErrInvalidConfig.Error()+": ")
	return fmt.Errorf("%w: line %d: %s", ErrInvalidConfig, line, msg)
}

// LoadLeases reads a config-dlock.properties file with ParseLeases. A file that cannot be
// opened is an error wrapping ErrInvalidConfig and the file's error (fs.ErrNotExist, say).
func LoadLeases(path string) (map[string]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	defer f.Close()
	return ParseLeases(f)
}
