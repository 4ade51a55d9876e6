//go:build race

package damage

// raceEnabled says the race detector is on: slow tests then do less.
const raceEnabled = true
