package state

import (
	"fmt"
	"regexp"
	"slices"
)

// Blocklist records a blocklist a run put in effect: the batches after
// Step are made with the documents it names written as padding. Its
// Fingerprint names its entries (the job config's blocklist, files read
// included; "" records that a resume gave none after one was in effect),
// Entries counts them. A rank's log holds every blocklist in step order:
// the last is in effect. It is not part of the corpus's fingerprint: a
// resume may add or change one.
type Blocklist struct {
	Fingerprint string `json:"fingerprint"`
	Entries     int    `json:"entries"`
	Step        uint64 `json:"step"`
}

// maxBlocklists bounds the records a state may hold: a resume adds one
// only when its blocklist differs from the one in effect.
const maxBlocklists = 1024

var blocklistPrint = regexp.MustCompile(`^([0-9a-f]{16})?$`)

// checkBlocklists checks a state's blocklist log: at most maxBlocklists
// records, fingerprints of 16 hex digits (or empty), steps in order and
// not past the state's step.
func checkBlocklists(log []Blocklist, step uint64) error {
	if len(log) > maxBlocklists {
		return fmt.Errorf("blocklists: %d records, more than %d", len(log), maxBlocklists)
	}
	for i, b := range log {
		switch {
		case !blocklistPrint.MatchString(b.Fingerprint):
			return fmt.Errorf("blocklists[%d]: fingerprint %q is not 16 hex digits", i, b.Fingerprint)
		case b.Entries < 0 || (b.Entries == 0) != (b.Fingerprint == ""):
			return fmt.Errorf("blocklists[%d]: %d entries with fingerprint %q", i, b.Entries, b.Fingerprint)
		case b.Step > step:
			return fmt.Errorf("blocklists[%d]: step %d is past the state's step %d", i, b.Step, step)
		case i > 0 && b.Step < log[i-1].Step:
			return fmt.Errorf("blocklists[%d]: step %d is before the record before it (%d)", i, b.Step, log[i-1].Step)
		}
	}
	return nil
}

// InEffect is the blocklist record in effect (the last), ok false when the
// log is empty.
func InEffect(log []Blocklist) (Blocklist, bool) {
	if len(log) == 0 {
		return Blocklist{}, false
	}
	return log[len(log)-1], true
}

// AddBlocklist appends record b to a log, keeping the newest maxBlocklists
// records: a log read back is never longer than checkBlocklists allows.
func AddBlocklist(log []Blocklist, b Blocklist) []Blocklist {
	out := append(slices.Clone(log), b)
	return out[max(0, len(out)-maxBlocklists):]
}

// mergeBlocklists merges the blocklist log of file name into the one merged
// so far (from file from): the files of one world log the same records, a
// file saved at a later step perhaps more of them; the log whose last
// record is the latest is kept, and one whose last record the other lacks
// is refused, naming both files.
func mergeBlocklists(merged []Blocklist, from string, log []Blocklist, name string) ([]Blocklist, string, error) {
	if len(merged) == 0 {
		return log, name, nil
	}
	keep, keepName, other, otherName := merged, from, log, name
	last, lastOther := keep[len(keep)-1], other[len(other)-1]
	if lastOther.Step > last.Step || (lastOther.Step == last.Step && len(other) > len(keep)) {
		keep, keepName, other, otherName = other, otherName, keep, keepName
		lastOther = other[len(other)-1]
	}
	if !slices.Contains(keep, lastOther) {
		return nil, "", fmt.Errorf("%w: the blocklist logs disagree: %s has blocklist %q from step %d, which %s does not log; the ranks of a run log the same blocklists",
			ErrMismatch, otherName, lastOther.Fingerprint, lastOther.Step+1, keepName)
	}
	return keep, keepName, nil
}
