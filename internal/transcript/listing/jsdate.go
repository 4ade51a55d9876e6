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
	i := 0
	num := func(n int) (int, bool) {
		if i+n > len(s) {
			return 0, false
		}
		v := 0
		for _, c := range []byte(s[i : i+n]) {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		i += n
		return v, true
	}
	var year int
	switch {
	case len(s) > 0 && (s[0] == '+' || s[0] == '-'):
		neg := s[0] == '-'
		i++
		y, ok := num(6)
		if !ok || (neg && y == 0) {
			return 0, false
		}
		year = y
		if neg {
			year = -y
		}
	default:
		y, ok := num(4)
		if !ok {
			return 0, false
		}
		year = y
	}
	month, day := 1, 1
	if i < len(s) && s[i] == '-' {
		i++
		m, ok := num(2)
		if !ok || m < 1 || m > 12 {
			return 0, false
		}
		month = m
		if i < len(s) && s[i] == '-' {
			i++
			d, ok := num(2)
			if !ok || d < 1 || d > 31 {
				return 0, false
			}
			day = d
		}
	}
	if i == len(s) {
		return time.Date(year, time.Month(month), day, 0, 0, 0, 0, time.UTC).UnixMilli(), true
	}
	if s[i] != 'T' && s[i] != 't' {
		return 0, false
	}
	i++
	hour, ok := num(2)
	if !ok || i >= len(s) || s[i] != ':' {
		return 0, false
	}
	i++
	minute, ok := num(2)
	if !ok {
		return 0, false
	}
	sec, milli := 0, 0
	if i < len(s) && s[i] == ':' {
		i++
		if sec, ok = num(2); !ok {
			return 0, false
		}
		if i < len(s) && s[i] == '.' {
			i++
			digits := 0
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				if digits < 3 {
					milli = milli*10 + int(s[i]-'0')
				}
				digits++
				i++
			}
			if digits == 0 {
				return 0, false
			}
			for ; digits < 3; digits++ {
				milli *= 10
			}
		}
	}
	if minute > 59 || sec > 59 || hour > 24 || (hour == 24 && (minute != 0 || sec != 0 || milli != 0)) {
		return 0, false
	}
	loc := local
	if i < len(s) {
		switch s[i] {
		case 'Z', 'z':
			i++
			loc = time.UTC
		case '+', '-':
			sign := 1
			if s[i] == '-' {
				sign = -1
			}
			i++
			oh, ok := num(2)
			if !ok {
				return 0, false
			}
			if i < len(s) && s[i] == ':' {
				i++
			}
			om, ok := num(2)
			if !ok || oh > 23 || om > 59 {
				return 0, false
			}
			loc = time.FixedZone("", sign*(oh*3600+om*60))
		default:
			return 0, false
		}
	}
	if i != len(s) {
		return 0, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, milli*int(time.Millisecond), loc)
	return t.UnixMilli(), true
}
