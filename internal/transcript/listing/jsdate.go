package listing

import (
	"time"
)

// jsDateParse is Date.parse for the ECMAScript date time string format:
// YYYY, YYYY-MM, YYYY-MM-DD (UTC), optionally followed by THH:mm,
// THH:mm:ss or THH:mm:ss.s+ and Z or ±HH:mm (local time without an offset);
// extended years (±YYYYYY) too. Milliseconds are truncated, out-of-range
// days roll over as in V8. Other strings give ok false.
func jsDateParse(s string) (ms int64, ok bool) { return jsDateParseIn(s, time.Local) }

// jsDateParseIn is jsDateParse with local time in local: tests pass a
// fixed zone instead of changing time.Local, which every goroutine reads.
func jsDateParseIn(s string, local *time.Location) (ms int64, ok bool) {
	d := &jsDateScanner{s: s}
	year, month, day, ok := d.date()
	if !ok {
		return 0, false
	}
	if d.done() {
		// A date alone is UTC, unlike a date with a time.
		return time.Date(year, month, day, 0, 0, 0, 0, time.UTC).UnixMilli(), true
	}
	if !d.skip('T') && !d.skip('t') {
		return 0, false
	}
	hour, minute, sec, milli, ok := d.clock()
	if !ok {
		return 0, false
	}
	loc, ok := d.zone(local)
	if !ok || !d.done() {
		return 0, false
	}
	t := time.Date(year, month, day, hour, minute, sec, milli*int(time.Millisecond), loc)
	return t.UnixMilli(), true
}

// jsDateScanner reads a date time string from left to right; each step
// consumes its part of the string or reports that it is malformed.
type jsDateScanner struct {
	s string
	i int // the next byte to read
}

func (d *jsDateScanner) done() bool { return d.i == len(d.s) }

// skip consumes c when it is the next byte.
func (d *jsDateScanner) skip(c byte) bool {
	if d.i < len(d.s) && d.s[d.i] == c {
		d.i++
		return true
	}
	return false
}

// number reads exactly n decimal digits.
func (d *jsDateScanner) number(n int) (int, bool) {
	if d.i+n > len(d.s) {
		return 0, false
	}
	v := 0
	for _, c := range []byte(d.s[d.i : d.i+n]) {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	d.i += n
	return v, true
}

// date reads YYYY or ±YYYYYY, then optionally -MM and -DD; the month and
// day default to the first.
func (d *jsDateScanner) date() (year int, month time.Month, day int, ok bool) {
	if year, ok = d.year(); !ok {
		return 0, 0, 0, false
	}
	month, day = time.January, 1
	if !d.skip('-') {
		return year, month, day, true
	}
	m, ok := d.number(2)
	if !ok || m < 1 || m > 12 {
		return 0, 0, 0, false
	}
	month = time.Month(m)
	if !d.skip('-') {
		return year, month, day, true
	}
	if day, ok = d.number(2); !ok || day < 1 || day > 31 {
		return 0, 0, 0, false
	}
	return year, month, day, true
}

// year reads four digits, or a sign and six (an extended year; -000000
// is not one).
func (d *jsDateScanner) year() (int, bool) {
	if d.i >= len(d.s) || (d.s[d.i] != '+' && d.s[d.i] != '-') {
		return d.number(4)
	}
	neg := d.s[d.i] == '-'
	d.i++
	y, ok := d.number(6)
	if !ok || (neg && y == 0) {
		return 0, false
	}
	if neg {
		y = -y
	}
	return y, true
}

// clock reads HH:mm, optionally followed by :ss and .s+, and checks the
// ranges (24:00 is allowed, for the end of the day).
func (d *jsDateScanner) clock() (hour, minute, sec, milli int, ok bool) {
	hour, ok = d.number(2)
	if !ok || !d.skip(':') {
		return 0, 0, 0, 0, false
	}
	if minute, ok = d.number(2); !ok {
		return 0, 0, 0, 0, false
	}
	if d.skip(':') {
		if sec, ok = d.number(2); !ok {
			return 0, 0, 0, 0, false
		}
		if d.skip('.') {
			if milli, ok = d.millis(); !ok {
				return 0, 0, 0, 0, false
			}
		}
	}
	if minute > 59 || sec > 59 || hour > 24 || (hour == 24 && (minute != 0 || sec != 0 || milli != 0)) {
		return 0, 0, 0, 0, false
	}
	return hour, minute, sec, milli, true
}

// millis reads the fraction of a second (at least one digit) as
// milliseconds; digits past the third are read and truncated.
func (d *jsDateScanner) millis() (int, bool) {
	milli, digits := 0, 0
	for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
		if digits < 3 {
			milli = milli*10 + int(d.s[d.i]-'0')
		}
		digits++
		d.i++
	}
	if digits == 0 {
		return 0, false
	}
	for ; digits < 3; digits++ {
		milli *= 10
	}
	return milli, true
}

// zone reads the offset after the time: Z, ±HH:mm or ±HHmm; none means
// local time.
func (d *jsDateScanner) zone(local *time.Location) (*time.Location, bool) {
	if d.done() {
		return local, true
	}
	if d.skip('Z') || d.skip('z') {
		return time.UTC, true
	}
	sign := 1
	switch {
	case d.skip('+'):
	case d.skip('-'):
		sign = -1
	default:
		return nil, false
	}
	oh, ok := d.number(2)
	if !ok {
		return nil, false
	}
	d.skip(':')
	om, ok := d.number(2)
	if !ok || oh > 23 || om > 59 {
		return nil, false
	}
	return time.FixedZone("", sign*(oh*3600+om*60)), true
}
