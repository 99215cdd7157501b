package ring

import (
	"encoding/binary"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// clientView maps a ring file read-write as a client does and reads and
// writes the control block by the documented offsets, not through Control.
type clientView struct {
	t   *testing.T
	mem []byte
}

func mapClient(t *testing.T, r interface{ Path() string }) *clientView {
	f, err := os.OpenFile(r.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return &clientView{t: t, mem: m}
}

func (c *clientView) u64(off int) uint64 { return binary.LittleEndian.Uint64(c.mem[off:]) }
func (c *clientView) u32(off int) uint32 { return binary.LittleEndian.Uint32(c.mem[off:]) }
func (c *clientView) consumer(i int) int {
	return int(c.u32(HeaderConsumerRecords)) + i*ConsumerRecordBytes
}

// slotRec is the offset of slot i's record.
func slotRec(i int) int { return HeaderBytes + i*SlotRecordBytes }

func TestControlLayout(t *testing.T) {
	r, err := NewShmRing(t.TempDir(), "ring", 5, 3000, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := mapClient(t, r)
	if string(c.mem[:8]) != Magic || c.u32(HeaderVersion) != Version || c.u32(HeaderSlots) != 5 || c.u32(HeaderConsumers) != 3 {
		t.Fatalf("header: magic %q version %d slots %d consumers %d", c.mem[:8], c.u32(HeaderVersion), c.u32(HeaderSlots), c.u32(HeaderConsumers))
	}
	if int(c.u64(HeaderDataOffset)) != r.DataOffset() || int(c.u64(HeaderStride)) != r.Stride() || r.DataOffset()%os.Getpagesize() != 0 {
		t.Fatalf("data offset %d stride %d; ring says %d, %d", c.u64(HeaderDataOffset), c.u64(HeaderStride), r.DataOffset(), r.Stride())
	}
	if c.u32(HeaderSlotRecords) != HeaderBytes || c.u32(HeaderConsumerRecords) < HeaderBytes+5*SlotRecordBytes ||
		c.u32(HeaderConsumerRecords)%ConsumerRecordAlign != 0 || c.consumer(3) > r.DataOffset() {
		t.Fatalf("records: slots at %d, consumers at %d, data at %d", c.u32(HeaderSlotRecords), c.u32(HeaderConsumerRecords), r.DataOffset())
	}
	ctl := r.Control()
	r.Slot(3)[0] = 42
	ctl.Publish(9, 3, 7, 0, 0)
	if c.u64(HeaderPublished) != 9 || c.u64(slotRec(3)+SlotRecordStep) != 9 || c.u32(slotRec(3)+SlotRecordLines) != 7 || c.mem[r.DataOffset()+3*r.Stride()] != 42 {
		t.Fatalf("after publish: published %d, slot 3 step %d lines %d", c.u64(HeaderPublished), c.u64(slotRec(3)+SlotRecordStep), c.u32(slotRec(3)+SlotRecordLines))
	}
	seq := c.u32(HeaderPublishSeq)
	ctl.Finish(StateEnded, 9)
	if c.u32(HeaderState) != StateEnded || c.u64(HeaderEndStep) != 9 || c.u32(HeaderPublishSeq) == seq {
		t.Fatalf("after finish: state %d end %d seq %d (was %d)", c.u32(HeaderState), c.u64(HeaderEndStep), c.u32(HeaderPublishSeq), seq)
	}
	// Consumer 2 releases step 8 and reports two waits.
	binary.LittleEndian.PutUint64(c.mem[c.consumer(2)+ConsumerRecordReleased:], 8)
	binary.LittleEndian.PutUint64(c.mem[c.consumer(2)+ConsumerRecordWaitCount:], 2)
	binary.LittleEndian.PutUint64(c.mem[c.consumer(2)+ConsumerRecordWaitSumNs:], 5000)
	binary.LittleEndian.PutUint32(c.mem[c.consumer(2)+ConsumerRecordWaitBuckets+4:], 2)
	if ctl.Released(2) != 8 || ctl.Released(1) != 0 {
		t.Fatalf("released: %d %d", ctl.Released(2), ctl.Released(1))
	}
	b, n, sum := ctl.WaitStats(2)
	if n != 2 || sum != 5000 || b[1] != 2 || b[0] != 0 {
		t.Fatalf("wait stats %v %d %d", b, n, sum)
	}
}

// TestControlUnpublishTakesTheEndBack: a change of weights that remakes
// the batches after step 2 of a ring whose end was announced after step 4
// takes the end back with them (it used to stay: a client waiting for step
// 3 read "ended" and lost steps 3 and 4); a failed or closed ring stays so.
func TestControlUnpublishTakesTheEndBack(t *testing.T) {
	for _, final := range []uint32{StateEnded, StateFailed, StateClosed} {
		r, err := NewShmRing(t.TempDir(), "ring", 4, 100, 1)
		if err != nil {
			t.Fatal(err)
		}
		c := mapClient(t, r)
		ctl := r.Control()
		for s := uint64(1); s <= 4; s++ {
			ctl.Publish(s, int(s-1), 1, 0, 0)
		}
		if final == StateClosed {
			ctl.MarkClosed()
		} else {
			ctl.Finish(final, 4)
		}
		ctl.Unpublish(2)
		want := final
		if final == StateEnded {
			want = StateRunning
		}
		if c.u64(HeaderPublished) != 2 || c.u32(HeaderState) != want {
			t.Errorf("state %d after the steps after 2 were taken back: published %d, state %d; want 2, %d",
				final, c.u64(HeaderPublished), c.u32(HeaderState), want)
		}
		r.Close()
	}
}

// TestControlWakeups: a release watcher sleeping on the release futex is
// woken by a client's bump and wake (through the client's own mapping), and
// a client sleeping on the publish futex is woken by Publish when it says it
// waits.
func TestControlWakeups(t *testing.T) {
	r, err := NewShmRing(t.TempDir(), "ring", 2, 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := mapClient(t, r)
	ctl := r.Control()

	woke := make(chan time.Duration)
	seq := ctl.ReleaseSeq()
	go func() {
		start := time.Now()
		ctl.WaitRelease(seq, 10*time.Second)
		woke <- time.Since(start)
	}()
	time.Sleep(20 * time.Millisecond)
	rel := (*uint32)(unsafe.Pointer(&c.mem[HeaderReleaseSeq]))
	atomic.AddUint32(rel, 1)
	futexWake(rel)
	if d := <-woke; d > 5*time.Second {
		t.Fatalf("release watcher slept %v: not woken", d)
	}

	pub := (*uint32)(unsafe.Pointer(&c.mem[HeaderPublishSeq]))
	binary.LittleEndian.PutUint32(c.mem[c.consumer(0)+ConsumerRecordWaiting:], 1)
	v := atomic.LoadUint32(pub)
	go func() {
		time.Sleep(20 * time.Millisecond)
		ctl.Publish(1, 0, 1, 0, 0)
	}()
	start := time.Now()
	futexWait(pub, v, 10*time.Second)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("client slept %v: Publish did not wake it", d)
	}
	if c.u64(HeaderPublished) != 1 {
		t.Fatal("woken before the step was published")
	}
}

func TestControlFile(t *testing.T) {
	dir := t.TempDir()
	f, err := NewControlFile(dir, "ring.ctl", 4, 2, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(f.Path())
	if err != nil || fi.Mode().Perm() != 0o600 || int(fi.Size()) != f.Size() || f.Size()%os.Getpagesize() != 0 {
		t.Fatalf("file %v (size %d), err %v", fi, f.Size(), err)
	}
	c := mapClient(t, f)
	if string(c.mem[:8]) != Magic || c.u32(HeaderSlots) != 4 || c.u32(HeaderConsumers) != 2 || c.u64(HeaderDataOffset) != 0 ||
		c.u64(HeaderStride) != 1<<20 {
		t.Fatalf("header: magic %q slots %d consumers %d data offset %d stride %d", c.mem[:8], c.u32(HeaderSlots), c.u32(HeaderConsumers), c.u64(HeaderDataOffset), c.u64(HeaderStride))
	}
	if c.consumer(1)+ConsumerRecordBytes > f.Size() {
		t.Fatalf("consumer 1's record ends at %d, past the file's %d bytes", c.consumer(1)+ConsumerRecordBytes, f.Size())
	}
	ctl := f.Control()
	ctl.Publish(6, 1, 3, 0, 0)
	if c.u64(HeaderPublished) != 6 || c.u64(slotRec(1)+SlotRecordStep) != 6 || c.u32(slotRec(1)+SlotRecordLines) != 3 {
		t.Fatalf("after publish: published %d, slot 1 step %d lines %d", c.u64(HeaderPublished), c.u64(slotRec(1)+SlotRecordStep), c.u32(slotRec(1)+SlotRecordLines))
	}
	binary.LittleEndian.PutUint64(c.mem[c.consumer(1)+ConsumerRecordReleased:], 5)
	if ctl.Released(1) != 5 || ctl.Released(0) != 0 {
		t.Fatalf("released: %d, %d", ctl.Released(0), ctl.Released(1))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := os.Stat(f.Path()); !os.IsNotExist(err) {
		t.Fatalf("file still there after close: %v", err)
	}
	ctl.Publish(7, 2, 1, 0, 0) // a no-op once closed, not a fault
	if _, err := NewControlFile(dir, "bad", 1, 1, 4096); err == nil {
		t.Fatal("a 1-slot control block was made")
	}
	if _, err := NewControlFile(dir, "bad", 2, MaxConsumers+1, 4096); err == nil {
		t.Fatal("a control block for too many consumers was made")
	}
}
