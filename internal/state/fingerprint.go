package state

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Fingerprint identifies the corpus and the parts of the config that shape
// the token stream. Weights, batch size and epochs may change across a resume;
// nothing recorded here may.
type Fingerprint struct {
	SeqLen        uint32         `json:"seq_len"`
	LogicalShards uint32         `json:"logical_shards"`
	Seed          uint64         `json:"seed"`
	EOS           int64          `json:"eos_id"`
	BOS           int64          `json:"bos_id"`
	ShuffleWindow uint32         `json:"shuffle_window"`
	Datasets      []DatasetPrint `json:"datasets"`
	RunTokens     uint64         `json:"run_tokens,omitempty"` // 0 in states saved before it was a setting
}

// DatasetPrint identifies one dataset's files by name and size (not by full
// path, so a corpus may move to another mount between save and resume).
type DatasetPrint struct {
	Name   string `json:"name"`
	Format string `json:"format"`
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes"`
	Units  uint64 `json:"units"`
	Digest string `json:"digest"`
	// Field, Tokenizer and OnBadRecord shape what text and Arrow datasets
	// serve; empty for the other formats.
	Field       string `json:"field,omitempty"`
	Tokenizer   string `json:"tokenizer,omitempty"`
	OnBadRecord string `json:"on_bad_record,omitempty"`
}

// FileDigest is the digest of a dataset's file list: base names and sizes in order.
func FileDigest(paths []string, sizes []int64) string {
	h := sha256.New()
	for i, p := range paths {
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(p), sizes[i])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Names lists the datasets' names, in order.
func (f Fingerprint) Names() []string {
	names := make([]string, len(f.Datasets))
	for i, d := range f.Datasets {
		names[i] = d.Name
	}
	return names
}

// Diff lists, in words, how the fingerprint saved in a state file (f) differs
// from the current one (cur); empty when they match.
func (f Fingerprint) Diff(cur Fingerprint) []string {
	var d []string
	num := func(field string, saved, now any) {
		if fmt.Sprint(saved) != fmt.Sprint(now) {
			d = append(d, fmt.Sprintf("%s is %v in the saved state, %v now", field, saved, now))
		}
	}
	num("seq_len", f.SeqLen, cur.SeqLen)
	num("logical_shards", f.LogicalShards, cur.LogicalShards)
	num("seed", f.Seed, cur.Seed)
	num("eos_id", f.EOS, cur.EOS)
	num("bos_id", f.BOS, cur.BOS)
	num("shuffle_window", f.ShuffleWindow, cur.ShuffleWindow)
	num("run_tokens", f.RunTokens, cur.RunTokens)
	if len(f.Datasets) != len(cur.Datasets) {
		d = append(d, fmt.Sprintf("%d datasets in the saved state (%s), %d now (%s)",
			len(f.Datasets), names(f.Datasets), len(cur.Datasets), names(cur.Datasets)))
		return d
	}
	for i, s := range f.Datasets {
		c := cur.Datasets[i]
		switch {
		case s.Name != c.Name:
			d = append(d, fmt.Sprintf("dataset %d is %q in the saved state, %q now", i, s.Name, c.Name))
		case s.Format != c.Format:
			d = append(d, fmt.Sprintf("dataset %q: format is %s in the saved state, %s now", s.Name, s.Format, c.Format))
		case s.Tokenizer != c.Tokenizer:
			d = append(d, fmt.Sprintf("dataset %q: tokenizer is %q in the saved state, %q now", s.Name, s.Tokenizer, c.Tokenizer))
		case s.Field != c.Field:
			d = append(d, fmt.Sprintf("dataset %q: field is %q in the saved state, %q now", s.Name, s.Field, c.Field))
		case s.OnBadRecord != c.OnBadRecord:
			d = append(d, fmt.Sprintf("dataset %q: on_bad_record is %q in the saved state, %q now", s.Name, s.OnBadRecord, c.OnBadRecord))
		case s.Digest != c.Digest || s.Units != c.Units:
			d = append(d, fmt.Sprintf("dataset %q: files differ (saved: %d files, %d bytes, %d units, digest %s; now: %d files, %d bytes, %d units, digest %s)",
				s.Name, s.Files, s.Bytes, s.Units, s.Digest, c.Files, c.Bytes, c.Units, c.Digest))
		}
	}
	return d
}

// Reconcile checks a saved fingerprint (f) against the current one, which
// may add datasets after the saved ones but must keep every saved one as it
// was, by name and place (a dataset's place keys its shards' order). It
// returns each saved dataset's index now, and the names of the datasets
// added; the error says what differs otherwise.
func (f Fingerprint) Reconcile(cur Fingerprint) (index []int, added []string, err error) {
	saved, now := f, cur
	saved.Datasets, now.Datasets = nil, nil
	d := saved.Diff(now)
	byName := make(map[string]int, len(cur.Datasets))
	for i, c := range cur.Datasets {
		byName[c.Name] = i
	}
	index = make([]int, len(f.Datasets))
	kept := make(map[int]bool, len(f.Datasets))
	for i, s := range f.Datasets {
		j, ok := byName[s.Name]
		if !ok {
			d = append(d, fmt.Sprintf("dataset %q is in the saved state but not in the config (to leave it out of the mix and keep its cursors, give it weight 0)", s.Name))
			continue
		}
		if j != i {
			d = append(d, fmt.Sprintf("dataset %q is dataset %d in the saved state, %d now (keep the saved datasets in their order; add new ones after them)", s.Name, i, j))
			continue
		}
		d = append(d, Fingerprint{Datasets: []DatasetPrint{s}}.Diff(Fingerprint{Datasets: []DatasetPrint{cur.Datasets[j]}})...)
		index[i], kept[j] = j, true
	}
	if len(d) > 0 {
		return nil, nil, errors.New(strings.Join(d, "; "))
	}
	for j, c := range cur.Datasets {
		if !kept[j] {
			added = append(added, c.Name)
		}
	}
	return index, added, nil
}

// Remap moves a saved mixture log's weights to the current datasets' order
// (index from Reconcile; datasets added since weigh 0 in the old entries).
func RemapMixture(m []MixChange, index []int, datasets int) []MixChange {
	move := func(ws []float64) []float64 {
		out := make([]float64, datasets)
		for i, w := range ws {
			if i < len(index) {
				out[index[i]] = w
			}
		}
		return out
	}
	out := CloneMixture(m)
	for i := range out {
		out[i].Weights = move(out[i].Weights)
		for k := range out[i].Schedule {
			out[i].Schedule[k].Weights = move(out[i].Schedule[k].Weights)
		}
	}
	return out
}

func names(ds []DatasetPrint) string {
	n := make([]string, len(ds))
	for i, d := range ds {
		n[i] = d.Name
	}
	return strings.Join(n, ", ")
}
