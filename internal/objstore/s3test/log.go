// What the server processes printed, kept for a failing test to show.

package s3test

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// logBuffer keeps the output of the server's processes in a file, which
// they write to themselves: off the test's heap. Kept in memory (the
// latest 1 to 2 MiB), a server's line for every request made the test
// process's heap grow with the requests it made, and
// BenchmarkObjectsScale, which measures that process's memory, makes
// tens of thousands.
type logBuffer struct {
	mu sync.Mutex
	f  *os.File
}

// logLimit is about the most of the output String shows: its end.
const logLimit = 1 << 20

// newLogBuffer creates the log at path.
func newLogBuffer(path string) (*logBuffer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("s3test: server log: %w", err)
	}
	return &logBuffer{f: f}, nil
}

// File is the log's file, for a process to write to.
func (b *logBuffer) File() *os.File { return b.f }

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.f.Write(p)
}

// Total is the count of bytes ever written.
func (b *logBuffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size()
}

func (b *logBuffer) size() int64 {
	info, err := b.f.Stat()
	if err != nil {
		return 0
	}
	return info.Size()
}

// Since is what was written after Total returned mark.
func (b *logBuffer) Since(mark int64) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.read(mark, b.size())
}

// read is bytes [from, to) of the log, or what could be read of them.
func (b *logBuffer) read(from, to int64) string {
	if from >= to {
		return ""
	}
	buf := make([]byte, to-from)
	n, err := b.f.ReadAt(buf, from)
	if err != nil && err != io.EOF {
		return fmt.Sprintf("[s3test: reading the server log: %v]\n%s", err, buf[:n])
	}
	return string(buf[:n])
}

// String is the end of the output, up to logLimit bytes, with a note of
// what it leaves out.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	total := b.size()
	if dropped := total - logLimit; dropped > 0 {
		return fmt.Sprintf("[... %d earlier bytes dropped ...]\n%s", dropped, b.read(dropped, total))
	}
	return b.read(0, total)
}

// Close closes the log's file.
func (b *logBuffer) Close() error { return b.f.Close() }
