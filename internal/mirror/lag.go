package mirror

import "time"

// lagMarks remembers when a transcript's unmirrored entries were
// acknowledged, so that the lag's age is that of the oldest entry not in
// PostgreSQL yet. (The time the transcript first fell behind is no
// measure: under a steady load the mirror is never quite level with the
// writer, and that time would grow with the length of the load.)
//
// A mark {entries, at} says that by at the transcript held entries
// entries. Marks closer than lagGrain are merged (the merged entries take
// the earlier time), and at most lagMax are kept (past it, new entries
// join the last mark): an age may read too old by that much, never too
// young, and a transcript far behind costs a few KiB at most.
type lagMarks struct {
	m []lagMark
}

type lagMark struct {
	entries uint64
	at      time.Time
}

const (
	lagGrain = 20 * time.Millisecond
	lagMax   = 64
)

// note records that the transcript holds entries entries at now, some of
// them not mirrored.
func (l *lagMarks) note(entries uint64, now time.Time) {
	n := len(l.m)
	switch {
	case n > 0 && entries < l.m[n-1].entries:
		// Fewer lines than before (rewritten shorter): whatever is behind
		// counts from the oldest time known.
		l.m = append(l.m[:0], lagMark{entries, l.m[0].at})
	case n > 0 && (now.Sub(l.m[n-1].at) < lagGrain || n >= lagMax):
		l.m[n-1].entries = entries
	case n == 0 || entries > l.m[n-1].entries:
		l.m = append(l.m, lagMark{entries, now})
	}
}

// mirrored forgets the marks the cursor covers: their entries are all
// in PostgreSQL.
func (l *lagMarks) mirrored(entries uint64) {
	i := 0
	for i < len(l.m) && l.m[i].entries <= entries {
		i++
	}
	if i == len(l.m) {
		l.m = l.m[:0]
		return
	}
	l.m = append(l.m[:0], l.m[i:]...)
}

// oldest is when the oldest entry not mirrored was acknowledged (at the
// latest), zero when every noted entry is mirrored.
func (l *lagMarks) oldest() time.Time {
	if len(l.m) == 0 {
		return time.Time{}
	}
	return l.m[0].at
}
