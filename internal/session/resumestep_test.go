package session

import (
	"fmt"
	"testing"
)

// TestResumedRanksStartAligned: a world of 3 ranks that saved at steps 5, 6
// and 7 (each rank's latest save before a crash) resumed from its folder
// onto 2 or 3 ranks: every resumed rank starts at step 7, the world's
// highest, as when every rank read every file. Before, each rank took the
// highest step of the files whose shards overlap its own: onto 3 ranks the
// ranks started at steps 5, 6 and 7, onto 2 at steps 6 and 7.
func TestResumedRanksStartAligned(t *testing.T) {
	m := newManager(t, Config{})
	cfg := jobConfig(t, t.TempDir(), 0)
	folder := t.TempDir()
	for r := uint32(0); r < 3; r++ {
		o := mustOpen(t, m, Request{Job: "src", DPRank: r, DPSize: 3, Transport: Inline, Config: cfg})
		feed, err := m.Attach(0, o.ID, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		steps := 5 + int(r)
		takeSome(t, feed, steps)
		if _, err := m.Save(0, o.ID, uint64(steps), folder); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(0, o.ID, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []uint32{2, 3} {
		for r := uint32(0); r < w; r++ {
			o := mustOpen(t, m, Request{Job: fmt.Sprint("onto", w), DPRank: r, DPSize: w, Transport: Inline, Config: cfg, ResumeFrom: folder})
			if o.StartStep != 7 {
				t.Errorf("rank %d of %d resumed at step %d, want 7 (the highest of the saved world's steps 5, 6, 7)", r, w, o.StartStep)
			}
			if err := m.Close(0, o.ID, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
}
