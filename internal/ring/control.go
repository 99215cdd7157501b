package ring

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dataloaderd/dataloaderd/internal/mapped"
)

// The control block is the first pages of a shared-memory ring file (or a
// file of its own beside a device ring). Through it the daemon announces
// batches and clients release them without a message per batch: the daemon
// publishes "slot k holds step s" in the block and clients write the last
// step they released; each side sleeps on a futex word only when it has to
// wait, and the other side wakes it only when it says it waits. The layout
// is api/ring/v1/control_block.json; layout.go holds its offsets
// (docs/control-block.md describes it).

// magicWord is the magic as the little-endian u64 it is stored as.
var magicWord = binary.LittleEndian.Uint64([]byte(Magic))

// controlBytes is the size of the control block for a ring, a page multiple.
func controlBytes(slots, consumers int) int {
	return StrideFor(consumerRecOffset(slots) + consumers*ConsumerRecordBytes)
}

// consumerRecOffset is the offset of the first consumer record.
func consumerRecOffset(slots int) int {
	end := HeaderBytes + slots*SlotRecordBytes
	return (end + ConsumerRecordAlign - 1) / ConsumerRecordAlign * ConsumerRecordAlign
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
	// waits counts the producer's waits for a slot (SetProducerWaiting(true)):
	// the daemon's own, not in the shared block.
	waits atomic.Uint64
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
	le.PutUint32(mem[HeaderVersion:], Version)
	le.PutUint32(mem[HeaderSlots:], uint32(slots))
	le.PutUint64(mem[HeaderDataOffset:], uint64(dataOffset))
	le.PutUint64(mem[HeaderStride:], uint64(stride))
	le.PutUint32(mem[HeaderConsumers:], uint32(consumers))
	le.PutUint32(mem[HeaderSlotRecords:], HeaderBytes)
	le.PutUint32(mem[HeaderConsumerRecords:], uint32(consumerRecOffset(slots)))
	c := &Control{mem: mem, slots: slots, consumers: consumers}
	// The magic goes last: a client that sees it sees the rest.
	atomic.StoreUint64(c.u64(HeaderMagic), magicWord)
	return c
}

func (c *Control) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&c.mem[off])) }
func (c *Control) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&c.mem[off])) }

func (c *Control) consumerRec(i int) int { return consumerRecOffset(c.slots) + i*ConsumerRecordBytes }

// Consumers is the number of consumer records.
func (c *Control) Consumers() int { return c.consumers }

// Publish announces that slot holds step's batch of lines lines, with
// segments cu_seqlens segments of at most maxSeqlen tokens. Steps are
// published in order, after the slot's bytes are written.
func (c *Control) Publish(step uint64, slot, lines, segments, maxSeqlen int) {
	if !c.use() {
		return
	}
	defer c.mu.RUnlock()
	rec := HeaderBytes + slot*SlotRecordBytes
	atomic.StoreUint64(c.u64(rec+SlotRecordStep), step)
	atomic.StoreUint32(c.u32(rec+SlotRecordLines), uint32(lines))
	atomic.StoreUint32(c.u32(rec+SlotRecordSegments), uint32(segments))
	atomic.StoreUint32(c.u32(rec+SlotRecordMaxSeqlen), uint32(maxSeqlen))
	atomic.StoreUint64(c.u64(HeaderPublished), step)
	c.wakeClients()
}

// Unpublish takes back the announcements of the steps after `after` (their
// batches are being made again), and the end if it was announced (the
// iteration goes on with them): clients wait for them to be published anew.
// A failed or closed state stays.
func (c *Control) Unpublish(after uint64) {
	if !c.use() {
		return
	}
	defer c.mu.RUnlock()
	atomic.StoreUint64(c.u64(HeaderPublished), after)
	atomic.CompareAndSwapUint32(c.u32(HeaderState), StateEnded, StateRunning)
}

// Finish sets the final state (ended after endStep, failed, or closed) and
// wakes every client.
func (c *Control) Finish(state uint32, endStep uint64) {
	if !c.use() {
		return
	}
	defer c.mu.RUnlock()
	atomic.StoreUint64(c.u64(HeaderEndStep), endStep)
	atomic.StoreUint32(c.u32(HeaderState), state)
	c.wakeClients()
}

// wakeClients bumps the publish sequence and, when a client sleeps on it,
// wakes them all.
func (c *Control) wakeClients() {
	atomic.AddUint32(c.u32(HeaderPublishSeq), 1)
	for i := 0; i < c.consumers; i++ {
		if atomic.LoadUint32(c.u32(c.consumerRec(i)+ConsumerRecordWaiting)) != 0 {
			futexWake(c.u32(HeaderPublishSeq))
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
	atomic.CompareAndSwapUint32(c.u32(HeaderState), StateRunning, StateClosed)
	c.wakeClients()
}

// Released is the last step consumer i released.
func (c *Control) Released(i int) uint64 {
	if !c.use() {
		return 0
	}
	defer c.mu.RUnlock()
	return atomic.LoadUint64(c.u64(c.consumerRec(i) + ConsumerRecordReleased))
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
		buckets[b] = uint64(atomic.LoadUint32(c.u32(rec + ConsumerRecordWaitBuckets + 4*b)))
	}
	return buckets, atomic.LoadUint64(c.u64(rec + ConsumerRecordWaitCount)), atomic.LoadUint64(c.u64(rec + ConsumerRecordWaitSumNs))
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
	atomic.StoreUint32(c.u32(HeaderProducerWaiting), v)
	if waiting {
		c.waits.Add(1)
		c.wakeWatchers()
	}
}

// ProducerWaits is how many times the producer began to wait for a slot: a
// release watcher that sees it move knows a wait began since it last looked,
// the moment a consumer's wake-up can be lost.
func (c *Control) ProducerWaits() uint64 { return c.waits.Load() }

// ProducerWaiting reports whether the producer waits for a free slot.
func (c *Control) ProducerWaiting() bool {
	if !c.use() {
		return false
	}
	defer c.mu.RUnlock()
	return atomic.LoadUint32(c.u32(HeaderProducerWaiting)) != 0
}

// ReleaseSeq is the release sequence, to pass to WaitRelease.
func (c *Control) ReleaseSeq() uint32 {
	if !c.use() {
		return 0
	}
	defer c.mu.RUnlock()
	return atomic.LoadUint32(c.u32(HeaderReleaseSeq))
}

// WaitRelease sleeps until a client bumps the release sequence past seq, a
// watcher is woken, or timeout passes.
func (c *Control) WaitRelease(seq uint32, timeout time.Duration) {
	if !c.use() {
		return
	}
	defer c.mu.RUnlock()
	futexWait(c.u32(HeaderReleaseSeq), seq, timeout)
}

// WakeReleaseWatchers wakes every goroutine in WaitRelease. It is called
// from goroutines of every kind (context callbacks, closes), so a block
// whose file its client cut short is left alone here rather than fault.
func (c *Control) WakeReleaseWatchers() {
	if !c.use() {
		return
	}
	defer c.mu.RUnlock()
	_ = mapped.Guard(func() error { c.wakeWatchers(); return nil })
}

func (c *Control) wakeWatchers() {
	atomic.AddUint32(c.u32(HeaderReleaseSeq), 1)
	futexWake(c.u32(HeaderReleaseSeq))
}
