package transcripttest

import (
	"bytes"
	"math/rand/v2"
)

// GenEntry makes a random entry: usually a JSON object, with random
// whitespace, strings full of escapes and non-ASCII text, sometimes a
// broken piece, and sometimes mutated afterwards.
func GenEntry(r *rand.Rand) []byte {
	g := &gen{r: r}
	g.ws()
	if r.IntN(10) == 0 {
		g.value(1)
	} else {
		g.object(0)
	}
	g.ws()
	b := g.b
	if r.IntN(4) == 0 {
		b = Mutate(r, b)
	}
	return b
}

type gen struct {
	r *rand.Rand
	b []byte
}

var (
	goodPieces = []string{"a", "hello world", " ", "é", "日本語", "😀", "\u2028", "<>&", `\"`, `\\`, `\/`, `\b`, `\f`,
		`\n`, `\r`, `\t`, `\u00e9`, `\u00E9`, `\u0000`, `\uD83D\uDE00`, `\ud83d\ude00`, `\\ud800`, `\\\\`, "\uFFFD", "\U0010FFFF"}
	badPieces = []string{`\ud800`, `\udfff`, `\ud800\ud800`, `\udc00\ud800`, `\uDBFF`, `\u12`, `\x`, `\`, "\x00", "\xff", "\xc3",
		"\xed\xa0\x80", "\xc0\xaf", "\x01", "\n", "\t", "\xf4\x90\x80\x80", "\xe2\x82"}
	goodNumbers = []string{"0", "-0", "1", "-12", "3.14", "1e10", "1E-5", "-0.5e+3", "123456789012345678901234567890"}
	badNumbers  = []string{"01", "1.", "-", ".5", "1e", "+1", "0x10", "NaN", "-Infinity", "1.e3"}
	keys        = []string{`"uuid"`, `"uuid"`, `"\u0075uid"`, `"uu\u0069d"`, `"UUID"`, `"type"`, `"a"`, `"message"`, `"é"`, `""`}
)

func (g *gen) ws() {
	if g.r.IntN(4) == 0 {
		for n := g.r.IntN(3) + 1; n > 0; n-- {
			g.b = append(g.b, " \t\r\n"[g.r.IntN(4)])
		}
	}
}

func (g *gen) rare() bool { return g.r.IntN(60) == 0 }

func (g *gen) str() {
	g.b = append(g.b, '"')
	for n := g.r.IntN(5); n > 0; n-- {
		if g.rare() {
			g.b = append(g.b, badPieces[g.r.IntN(len(badPieces))]...)
		} else {
			g.b = append(g.b, goodPieces[g.r.IntN(len(goodPieces))]...)
		}
	}
	g.b = append(g.b, '"')
}

func (g *gen) object(depth int) {
	g.b = append(g.b, '{')
	g.ws()
	for i, n := 0, g.r.IntN(5); i < n; i++ {
		if i > 0 {
			g.b = append(g.b, ',')
			g.ws()
		}
		if g.r.IntN(5) == 0 {
			g.str()
		} else {
			g.b = append(g.b, keys[g.r.IntN(len(keys))]...)
		}
		g.ws()
		g.b = append(g.b, ':')
		g.ws()
		g.value(depth + 1)
		g.ws()
	}
	g.b = append(g.b, '}')
}

func (g *gen) value(depth int) {
	k := g.r.IntN(10)
	if depth > 4 {
		k = 4 + g.r.IntN(6)
	}
	switch k {
	case 0, 1:
		g.object(depth)
	case 2, 3:
		g.b = append(g.b, '[')
		g.ws()
		for i, n := 0, g.r.IntN(4); i < n; i++ {
			if i > 0 {
				g.b = append(g.b, ',')
				g.ws()
			}
			g.value(depth + 1)
			g.ws()
		}
		g.b = append(g.b, ']')
	case 4, 5, 6:
		g.str()
	case 7, 8:
		if g.rare() {
			g.b = append(g.b, badNumbers[g.r.IntN(len(badNumbers))]...)
		} else {
			g.b = append(g.b, goodNumbers[g.r.IntN(len(goodNumbers))]...)
		}
	default:
		lits := []string{"true", "false", "null", "null"}
		if g.rare() {
			lits = []string{"tru", "nul", "True", "nulll"}
		}
		g.b = append(g.b, lits[g.r.IntN(len(lits))]...)
	}
}

// Mutate damages b the ways real transcripts get damaged: cut short,
// spliced, a byte lost, added or changed.
func Mutate(r *rand.Rand, b []byte) []byte {
	b = bytes.Clone(b)
	switch r.IntN(7) {
	case 0:
		return b[:r.IntN(len(b)+1)]
	case 1:
		return append(b, b...)
	case 2:
		i := r.IntN(len(b))
		return append(b[:i], b[i+1:]...)
	case 3:
		i := r.IntN(len(b) + 1)
		const chars = "{}[],:\"\\ \x00\xffa1\n"
		c := chars[r.IntN(len(chars))]
		return append(b[:i], append([]byte{c}, b[i:]...)...)
	case 4:
		b[r.IntN(len(b))] ^= byte(1 << r.IntN(8))
		return b
	case 5:
		return append([]byte("\xEF\xBB\xBF"), b...)
	}
	return append(b, "\n{}"...)
}
