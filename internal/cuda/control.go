package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The control block is the first pages of a shared-memory ring file. Through
// it the daemon announces batches and clients release them without a message
// per batch: the daemon publishes "slot k holds step s" in the block and
// clients write the last step they released; each side sleeps on a futex word
// only when it has to wait, and the other side wakes it only when it says it
// waits. Every field is little-endian; the layout is documented in
// docs/design.md and read by the Python client.
const (
	controlVersion = 1

	offMagic        = 0  // u64
	offVersion      = 8  // u32
	offSlots        = 12 // u32
	offDataOffset   = 16 // u64: file offset of slot 0
	offStride       = 24 // u64
	offPublished    = 32 // u64: last step whose batch is complete in its slot
	offEndStep      = 40 // u64: with state ended, the last step there is
	offState        = 48 // u32: ControlRunning, ControlEnded, ControlFailed, ControlClosed
	offPubSeq       = 52 // u32 futex: bumped after every publish and state change
	offRelSeq       = 56 // u32 futex: bumped by clients after a release the daemon waits for
	offProdWaiting  = 60 // u32: 1 while the producer waits for a free slot
	offConsumers    = 64 // u32
	offSlotRecs     = 68 // u32: offset of the slot records
	offConsumerRecs = 72 // u32: offset of the consumer records
	headerFixed     = 128

	slotRecBytes = 16 // step u64, lines u32, pad u32

	// ConsumerRecBytes is the size of one consumer's record: released u64 @0,
	// waiting u32 @8, wait_count u64 @16, wait_sum_ns u64 @24, then
	// WaitBuckets u32 counts @32 (bucket i counts the waits above
	// WaitBucketNs(i-1) and at most WaitBucketNs(i); longer waits are only in
	// wait_count).
	ConsumerRecBytes = 128
	recReleased      = 0
	recWaiting       = 8
	recWaitCount     = 16
	recWaitSum       = 24
	recWaitBuckets   = 32

	// WaitBuckets is the number of client wait-time buckets, 1 us to 4^11 us.
	WaitBuckets = 12

	// MaxConsumers bounds the consumers of one ring (one tensor/pipeline
	// parallel group).
	MaxConsumers = 256
)

// controlMagic is the first 8 bytes of a ring file, "DLDRING\x01".
var controlMagic = binary.LittleEndian.Uint64([]byte("DLDRING\x01"))

// Control states.
const (
	ControlRunning = 0
	ControlEnded   = 1
	ControlFailed  = 2
	ControlClosed  = 3
)

// WaitBucketNs is the upper bound of wait bucket i, in nanoseconds.
func WaitBucketNs(i int) float64 { return 1000 * math.Pow(4, float64(i)) }

// controlBytes is the size of the control block for a ring, a page multiple.
func controlBytes(slots, consumers int) int {
	return stride(consumerRecOffset(slots) + consumers*ConsumerRecBytes)
}

func consumerRecOffset(slots int) int {
	end := headerFixed + slots*slotRecBytes
	return (end + 127) / 128 * 128
}

// Control is the control block of a shared-memory ring, seen by the daemon.
// Its methods are safe for concurrent use, and do nothing once the ring is
// closed (the memory is unmapped then).
type Control struct {
	mem       []byte
	slots     int
	consumers int

	mu   sync.RWMutex // held for reading while the memory is used
	gone bool
}

// detach wakes every release watcher and makes later calls no-ops; the ring
// calls it before unmapping the memory.
func (c *Control) detach() {
	c.WakeReleaseWatchers()
	c.mu.Lock()
	c.gone = true
	c.mu.Unlock()
}

// use locks the memory for a call; false when the ring is closed.
func (c *Control) use() bool {
	c.mu.RLock()
	if c.gone {
		c.mu.RUnlock()
		return false
	}
	return true
}

// initControl writes a fresh control block into mem.
func initControl(mem []byte, slots, consumers, dataOffset, stride int) *Control {
	le := binary.LittleEndian
	le.PutUint32(mem[offVersion:], controlVersion)
	le.PutUint32(mem[offSlots:], uint32(slots))
	le.PutUint64(mem[offDataOffset:], uint64(dataOffset))
	le.PutUint64(mem[offStride:], uint64(stride))
	le.PutUint32(mem[offConsumers:], uint32(consumers))
	le.PutUint32(mem[offSlotRecs:], headerFixed)
	le.PutUint32(mem[offConsumerRecs:], uint32(consumerRecOffset(slots)))
	c := &Control{mem: mem, slots: slots, consumers: consumers}
	// The magic goes last: a client that sees it sees the rest.
	atomic.StoreUint64(c.u64(offMagic), controlMagic)
	return c
}

func (c *Control) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&c.mem[off])) }
func (c *Control) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&c.mem[off])) }

func (c *Control) consumerRec(i int) int { return consumerRecOffset(c.slots) + i*ConsumerRecBytes }

// Consumers is the number of consumer records.
func (c *Control) Consumers() int { return c.consumers }

// Publish announces that slot holds step's batch of lines lines. Steps are
// published in order, after the slot's bytes are written.
func (c *Control) Publish(step uint64, slot, lines int) {
	if !c.use() {
		return
	}
	defer c.mu.RUnlock()
	rec := headerFixed + slot*slotRecBytes
	atomic.StoreUint64(c.u64(rec), step)
	atomic.StoreUint32(c.u32(rec+8), uint32(lines))
	atomic.StoreUint64(c.u64(offPublished), step)
	c.wakeClients()
}

// Finish sets the final state (ended after endStep, failed, or closed) and
// wakes every client.
func (c *Control) Finish(state uint32, endStep uint64) {
	if !c.use() {
		return
	}
	defer c.mu.RUnlock()
	atomic.StoreUint64(c.u64(offEndStep), endStep)
	atomic.StoreUint32(c.u32(offState), state)
	c.wakeClients()
}

// wakeClients bumps the publish sequence and, when a client sleeps on it,
// wakes them all.
func (c *Control) wakeClients() {
	atomic.AddUint32(c.u32(offPubSeq), 1)
	for i := 0; i < c.consumers; i++ {
		if atomic.LoadUint32(c.u32(c.consumerRec(i)+recWaiting)) != 0 {
			futexWake(c.u32(offPubSeq))
			return
		}
	}
}

// MarkClosed sets the state to closed unless it is already final (ended or
// failed), and wakes every client: the session is gone.
func (c *Control) MarkClosed() {
	if !c.use() {
		return
	}
	defer c.mu.RUnlock()
	atomic.CompareAndSwapUint32(c.u32(offState), ControlRunning, ControlClosed)
	c.wakeClients()
}

// Released is the last step consumer i released.
func (c *Control) Released(i int) uint64 {
	if !c.use() {
		return 0
	}
	defer c.mu.RUnlock()
	return atomic.LoadUint64(c.u64(c.consumerRec(i) + recReleased))
}

// WaitStats returns consumer i's wait histogram: the count of each bucket
// (not cumulative; bounds WaitBucketNs), the number of waits and their sum
// in nanoseconds.
func (c *Control) WaitStats(i int) (buckets [WaitBuckets]uint64, count, sumNs uint64) {
	if !c.use() {
		return buckets, 0, 0
	}
	defer c.mu.RUnlock()
	rec := c.consumerRec(i)
	for b := range buckets {
		buckets[b] = uint64(atomic.LoadUint32(c.u32(rec + recWaitBuckets + 4*b)))
	}
	return buckets, atomic.LoadUint64(c.u64(rec + recWaitCount)), atomic.LoadUint64(c.u64(rec + recWaitSum))
}

// SetProducerWaiting tells clients whether the producer waits for a free
// slot, so they wake it after a release. Setting it also wakes every release
// watcher, so that releases made while nobody was told are seen at once.
func (c *Control) SetProducerWaiting(waiting bool) {
	if !c.use() {
		return
	}
	defer c.mu.RUnlock()
	var v uint32
	if waiting {
		v = 1
	}
	atomic.StoreUint32(c.u32(offProdWaiting), v)
	if waiting {
		c.wakeWatchers()
	}
}

// ProducerWaiting reports whether the producer waits for a free slot.
func (c *Control) ProducerWaiting() bool {
	if !c.use() {
		return false
	}
	defer c.mu.RUnlock()
	return atomic.LoadUint32(c.u32(offProdWaiting)) != 0
}

// ReleaseSeq is the release sequence, to pass to WaitRelease.
func (c *Control) ReleaseSeq() uint32 {
	if !c.use() {
		return 0
	}
	defer c.mu.RUnlock()
	return atomic.LoadUint32(c.u32(offRelSeq))
}

// WaitRelease sleeps until a client bumps the release sequence past seq, a
// watcher is woken, or timeout passes.
func (c *Control) WaitRelease(seq uint32, timeout time.Duration) {
	if !c.use() {
		return
	}
	defer c.mu.RUnlock()
	futexWait(c.u32(offRelSeq), seq, timeout)
}

// WakeReleaseWatchers wakes every goroutine in WaitRelease.
func (c *Control) WakeReleaseWatchers() {
	if !c.use() {
		return
	}
	defer c.mu.RUnlock()
	c.wakeWatchers()
}

func (c *Control) wakeWatchers() {
	atomic.AddUint32(c.u32(offRelSeq), 1)
	futexWake(c.u32(offRelSeq))
}

// Futex operations (linux/futex.h); the words live in a shared mapping, so
// the non-private forms are used.
const (
	futexOpWait = 0
	futexOpWake = 1
)

// futexWait sleeps while *addr == val, at most timeout. The word is in a
// shared file mapping, so the futex is not private to this process.
func futexWait(addr *uint32, val uint32, timeout time.Duration) {
	ts := unix.NsecToTimespec(int64(timeout))
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every process sleeping on addr.
func futexWake(addr *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWake, uintptr(math.MaxInt32),
		0, 0, 0)
}

// checkConsumers validates a consumer count for a ring.
func checkConsumers(n int) error {
	if n < 1 || n > MaxConsumers {
		return fmt.Errorf("%w: %d consumers (want 1 to %d)", ErrGeometry, n, MaxConsumers)
	}
	return nil
}
