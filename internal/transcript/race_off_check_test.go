//go:build !race

package transcript

// raceEnabled says the race detector is on: slow tests then do less.
const raceEnabled = false
