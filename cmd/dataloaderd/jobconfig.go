package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dataloaderd/dataloaderd/internal/objstore"
	"github.com/dataloaderd/dataloaderd/internal/state"
	"github.com/dataloaderd/dataloaderd/internal/stream"
)

// jobConfig is a job config file as the Python client reads it
// (clients/python/src/dataloaderd/config.py): the keys plan and explain
// need (explain marks the blocklist's documents); others (metadata,
// schedule, ...) are let be.
type jobConfig struct {
	SeqLen        *uint32 `json:"seq_len"`
	BatchSize     *uint32 `json:"batch_size"`
	Seed          uint64  `json:"seed"`
	LogicalShards *uint32 `json:"logical_shards"`
	EOS           *int64  `json:"eos_id"`
	BOS           *int64  `json:"bos_id"`
	Pad           *int64  `json:"pad_id"`
	Epochs        uint32  `json:"epochs"`
	ShuffleWindow uint32  `json:"shuffle_window"`
	RunTokens     uint64  `json:"run_tokens"`
	// SkipSteps are [first, last] pairs (explain says those steps were
	// skipped).
	SkipSteps [][]uint64 `json:"skip_steps"`
	Datasets  []struct {
		Name        string   `json:"name"`
		Path        string   `json:"path"`
		Format      string   `json:"format"`
		Weight      *float64 `json:"weight"`
		Dtype       string   `json:"dtype"`
		Field       string   `json:"field"`
		Tokenizer   string   `json:"tokenizer"`
		OnBadRecord string   `json:"on_bad_record"`
	} `json:"datasets"`
	Blocklist *struct {
		Documents []stream.BlockedDocument `json:"documents"`
		Files     []string                 `json:"files"`
	} `json:"blocklist"`
}

// readJobConfig reads a JSON job config into a stream.Config, with the
// client's defaults (logical_shards 64, weight 1, pad_id eos_id, no BOS),
// relative paths taken against the file's folder.
func readJobConfig(path string) (stream.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return stream.Config{}, err
	}
	var jc jobConfig
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&jc); err != nil {
		return stream.Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	switch {
	case jc.SeqLen == nil:
		return stream.Config{}, fmt.Errorf("config %s: seq_len is required", path)
	case jc.BatchSize == nil:
		return stream.Config{}, fmt.Errorf("config %s: batch_size is required", path)
	case jc.EOS == nil:
		return stream.Config{}, fmt.Errorf("config %s: eos_id is required", path)
	}
	cfg := stream.Config{SeqLen: *jc.SeqLen, BatchSize: *jc.BatchSize, Seed: jc.Seed, LogicalShards: 64,
		EOS: *jc.EOS, BOS: -1, Pad: *jc.EOS, Epochs: jc.Epochs, ShuffleWindow: jc.ShuffleWindow, RunTokens: jc.RunTokens}
	if jc.LogicalShards != nil {
		cfg.LogicalShards = *jc.LogicalShards
	}
	for i, r := range jc.SkipSteps {
		if len(r) != 2 {
			return stream.Config{}, fmt.Errorf("config %s: skip_steps[%d] has %d numbers; want [first, last]", path, i, len(r))
		}
		cfg.SkipSteps = append(cfg.SkipSteps, state.SkipRange{First: r[0], Last: r[1]})
	}
	if jc.BOS != nil {
		cfg.BOS = *jc.BOS
	}
	if jc.Pad != nil {
		cfg.Pad = *jc.Pad
	}
	dir := filepath.Dir(path)
	for _, d := range jc.Datasets {
		ds := stream.Dataset{Name: d.Name, Path: d.Path, Format: d.Format, Weight: 1, Dtype: d.Dtype, Field: d.Field,
			Tokenizer: d.Tokenizer, OnBadRecord: d.OnBadRecord}
		if d.Weight != nil {
			ds.Weight = *d.Weight
		}
		if !objstore.IsURL(ds.Path) && ds.Path != "" && !filepath.IsAbs(ds.Path) {
			ds.Path = filepath.Join(dir, ds.Path)
		}
		if t := ds.Tokenizer; t != "" && !filepath.IsAbs(t) && (strings.ContainsRune(t, os.PathSeparator) || strings.HasSuffix(t, ".json") || strings.HasSuffix(t, ".tiktoken")) {
			ds.Tokenizer = filepath.Join(dir, t)
		}
		cfg.Datasets = append(cfg.Datasets, ds)
	}
	if b := jc.Blocklist; b != nil {
		cfg.Blocklist.Documents = b.Documents
		for _, f := range b.Files {
			if !filepath.IsAbs(f) {
				f = filepath.Join(dir, f)
			}
			cfg.Blocklist.Files = append(cfg.Blocklist.Files, f)
		}
	}
	return cfg, nil
}
