// What the server processes printed, kept for a failing test to show.

package s3test

import (
	"fmt"
	"sync"
)

// logBuffer keeps the latest output of the server's processes, up to about
// logLimit bytes.
type logBuffer struct {
	mu    sync.Mutex
	buf   []byte
	total int64 // bytes ever written
}

const logLimit = 1 << 20

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(len(p))
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*logLimit {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-logLimit:]...)
	}
	return len(p), nil
}

// Total is the count of bytes ever written.
func (b *logBuffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Since is what was written after Total returned mark, as far as kept.
func (b *logBuffer) Since(mark int64) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := mark - (b.total - int64(len(b.buf)))
	if start < 0 {
		start = 0
	}
	return string(b.buf[start:])
}

// String is the kept output, with a note of what was dropped.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if dropped := b.total - int64(len(b.buf)); dropped > 0 {
		return fmt.Sprintf("[... %d earlier bytes dropped ...]\n%s", dropped, b.buf)
	}
	return string(b.buf)
}
