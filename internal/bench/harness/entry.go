package harness

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Entry sizes are the length of the JSONL line without its newline, as
// sessiond stores it (the generated JSON is already compact).
const (
	MinEntry = 200
	MaxEntry = 1 << 20
)

// Sizer picks the size of each entry.
type Sizer interface {
	Size(r *rand.Rand) int
	String() string
	// Mean is the expected size, for reports.
	Mean() float64
}

// ParseSize reads a size spec: a fixed size ("1KiB", "4096", "200B",
// "1MiB") or a distribution ("dist:agent"). Sizes must lie in
// MinEntry..MaxEntry.
func ParseSize(spec string) (Sizer, error) {
	if name, ok := strings.CutPrefix(spec, "dist:"); ok {
		if d, ok := distributions[name]; ok {
			return d, nil
		}
		names := make([]string, 0, len(distributions))
		for n := range distributions {
			names = append(names, "dist:"+n)
		}
		return nil, fmt.Errorf("unknown size distribution %q (known: %s)", spec, strings.Join(names, ", "))
	}
	n, err := parseBytes(spec)
	if err != nil {
		return nil, err
	}
	if n < MinEntry || n > MaxEntry {
		return nil, fmt.Errorf("entry size %s is outside %d B..1 MiB", spec, MinEntry)
	}
	return fixedSize(n), nil
}

func parseBytes(s string) (int, error) {
	units := []struct {
		suffix string
		mult   int
	}{{"MiB", 1 << 20}, {"KiB", 1 << 10}, {"MB", 1000 * 1000}, {"KB", 1000}, {"kB", 1000}, {"B", 1}}
	mult := 1
	num := strings.TrimSpace(s)
	for _, u := range units {
		if v, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q: want bytes such as 1024, 1KiB, 1MiB or dist:agent", s)
	}
	return n * mult, nil
}

type fixedSize int

func (f fixedSize) Size(*rand.Rand) int { return int(f) }
func (f fixedSize) Mean() float64       { return float64(f) }
func (f fixedSize) String() string {
	switch {
	case f%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", f>>20)
	case f%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", f>>10)
	}
	return fmt.Sprintf("%dB", int(f))
}

// bucket draws uniformly in [lo, hi] with probability weight.
type bucket struct {
	weight float64
	lo, hi int
}

type distribution struct {
	name    string
	buckets []bucket
}

// distributions: "agent" mixes what an agent transcript holds: mostly short
// user/assistant messages and tool calls, some medium tool results, rare
// large ones (file reads, command output) up to 1 MiB. Mean about 7 KiB.
var distributions = map[string]*distribution{
	"agent": {name: "dist:agent", buckets: []bucket{
		{0.60, 200, 1 << 10},
		{0.30, 1 << 10, 4 << 10},
		{0.08, 4 << 10, 32 << 10},
		{0.017, 32 << 10, 256 << 10},
		{0.003, 256 << 10, 1 << 20},
	}},
}

func (d *distribution) String() string { return d.name }

func (d *distribution) Size(r *rand.Rand) int {
	x := r.Float64()
	for _, b := range d.buckets {
		if x < b.weight {
			return b.lo + r.IntN(b.hi-b.lo+1)
		}
		x -= b.weight
	}
	last := d.buckets[len(d.buckets)-1]
	return last.lo + r.IntN(last.hi-last.lo+1)
}

func (d *distribution) Mean() float64 {
	var m, w float64
	for _, b := range d.buckets {
		m += b.weight * float64(b.lo+b.hi) / 2
		w += b.weight
	}
	return m / w
}

// filler is the text entries are padded with: printable ASCII with no
// character JSON needs to escape.
var filler = func() []byte {
	const text = "The quick brown fox jumps over the lazy dog; tool output follows. 0123456789 "
	b := make([]byte, 0, MaxEntry+len(text))
	for len(b) < MaxEntry {
		b = append(b, text...)
	}
	return b[:MaxEntry]
}()

// UUIDOf renders two random words as a version-4 UUID.
func UUIDOf(hi, lo uint64) string {
	hi = hi&^0xf000 | 0x4000     // version 4
	lo = lo&^(0xc<<60) | 0x8<<60 // RFC 4122 variant
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hi>>32, (hi>>16)&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
}

// NewUUID draws a random UUID from r.
func NewUUID(r *rand.Rand) string { return UUIDOf(r.Uint64(), r.Uint64()) }

// AppendEntry appends to dst one transcript entry of exactly size bytes
// (or of the skeleton's size when that is larger) carrying uuid, and
// returns it. Entries alternate between user and assistant messages as a
// transcript does.
func AppendEntry(dst []byte, size int, sessionID, uuid string, seq uint64) []byte {
	role := "user"
	if seq%2 == 1 {
		role = "assistant"
	}
	start := len(dst)
	dst = append(dst, `{"type":"`...)
	dst = append(dst, role...)
	dst = append(dst, `","uuid":"`...)
	dst = append(dst, uuid...)
	dst = append(dst, `","sessionId":"`...)
	dst = append(dst, sessionID...)
	dst = append(dst, `","seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"message":{"role":"`...)
	dst = append(dst, role...)
	dst = append(dst, `","content":"`...)
	const tail = `"}}`
	// Sizes above MaxEntry (the memory scenario's huge lines) repeat the
	// filler.
	for pad := size - (len(dst) - start) - len(tail); pad > 0; {
		k := min(pad, len(filler))
		dst = append(dst, filler[:k]...)
		pad -= k
	}
	return append(dst, tail...)
}

// AgentSizes is the "dist:agent" mix, for the scenarios that write
// transcripts of that shape themselves.
var AgentSizes Sizer = distributions["agent"]
