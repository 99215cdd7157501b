//go:build !race

package stream

// raceOn: the race detector is on (race_on_test.go).
const raceOn = false
