package stream

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
)

// JobFingerprint is the job's fingerprint in 8 hex digits: a digest of the
// state fingerprint (what shapes the token stream: datasets, seq_len,
// logical_shards, seed, ...) and the batch size. Weights are left out: they
// may change at run time and at a resume, and the state logs them. With a
// step and a data-parallel rank it names a batch (BatchID).
func (c *Corpus) JobFingerprint() string {
	b, err := json.Marshal(struct {
		Fingerprint any    `json:"fingerprint"`
		BatchSize   uint32 `json:"batch_size"`
	}{c.fp, c.cfg.BatchSize})
	if err != nil { // a struct of numbers and strings: never
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:4])
}

// BatchID names batch step of data-parallel rank dpRank of dpSize of the job
// whose JobFingerprint is fp: "<fp>-s<step>-r<dpRank>of<dpSize>". The
// Python client's Batch carries it (batch_id); dataloaderd explain takes
// it.
func BatchID(fp string, step uint64, dpRank, dpSize uint32) string {
	return fmt.Sprintf("%s-s%d-r%dof%d", fp, step, dpRank, dpSize)
}

var batchIDPattern = regexp.MustCompile(`^([0-9a-f]{8})-s([0-9]+)-r([0-9]+)of([0-9]+)$`)

// ParseBatchID reads a BatchID back.
func ParseBatchID(id string) (fp string, step uint64, dpRank, dpSize uint32, err error) {
	m := batchIDPattern.FindStringSubmatch(id)
	if m == nil {
		return "", 0, 0, 0, fmt.Errorf("batch id %q: want <8 hex digits>-s<step>-r<dp_rank>of<dp_size>, as a batch's batch_id", id)
	}
	step, err = strconv.ParseUint(m[2], 10, 64)
	r, rerr := strconv.ParseUint(m[3], 10, 32)
	w, werr := strconv.ParseUint(m[4], 10, 32)
	switch {
	case err != nil || rerr != nil || werr != nil:
		return "", 0, 0, 0, fmt.Errorf("batch id %q: a number out of range", id)
	case step == 0 || w == 0 || r >= w:
		return "", 0, 0, 0, fmt.Errorf("batch id %q: step counts from 1 and dp_rank must be below dp_size", id)
	}
	return m[1], step, uint32(r), uint32(w), nil
}
