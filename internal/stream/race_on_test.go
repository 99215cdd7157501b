//go:build race

package stream

// raceOn: the race detector is on; sync.Pool then drops some of what it
// is given, on purpose, so allocation counts are not what they are
// without it.
const raceOn = true
