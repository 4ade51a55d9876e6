package damage

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// bigTranscript streams a transcript of tool calls whose results are huge
// single lines, without holding any line in memory: real sessions have
// 12 MB lines in files of 100-400 MB.
type bigTranscript struct {
	resultSize int // bytes of text in each tool result
	turns      int
	turn       int
	queue      []genPart // what is left of the current turn
}

// genPart is literal text, or filler bytes of plain text.
type genPart struct {
	text   []byte
	filler int
}

var fillerText = []byte(strings.Repeat("the quick brown fox jumps over the lazy dog ", 1<<10))

func (g *bigTranscript) Read(p []byte) (int, error) {
	for len(g.queue) == 0 {
		if g.turn > g.turns {
			return 0, io.EOF
		}
		g.next()
	}
	part := &g.queue[0]
	var n int
	if part.text != nil {
		n = copy(p, part.text)
		part.text = part.text[n:]
		if len(part.text) == 0 {
			g.queue = g.queue[1:]
		}
		return n, nil
	}
	n = copy(p[:min(len(p), part.filler)], fillerText)
	if part.filler -= n; part.filler == 0 {
		g.queue = g.queue[1:]
	}
	return n, nil
}

// next queues the lines of the next turn: a prompt first, then an
// assistant tool call and its huge result.
func (g *bigTranscript) next() {
	k := g.turn
	g.turn++
	if k == 0 {
		g.queue = []genPart{{text: []byte(`{"type":"user","uuid":"u0","parentUuid":null,"sessionId":"s","message":{"role":"user","content":"go"}}` + "\n")}}
		return
	}
	prev := "u0"
	if k > 1 {
		prev = fmt.Sprintf("r%d", k-1)
	}
	call := fmt.Sprintf(`{"type":"assistant","uuid":"a%d","parentUuid":%q,"sessionId":"s","message":{"id":"m%d","role":"assistant","content":[{"type":"tool_use","id":"t%d","name":"Bash","input":{}}]}}`+"\n", k, prev, k, k)
	result := fmt.Sprintf(`{"type":"user","uuid":"r%d","parentUuid":"a%d","sessionId":"s","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":"`, k, k, k)
	g.queue = []genPart{{text: []byte(call + result)}, {filler: g.resultSize}, {text: []byte(`"}]}}` + "\n")}}
}

// TestCheckMemoryBounded checks a 200 MB transcript of 12 MB lines and
// requires the heap never to exceed twice the longest line plus 64 MiB.
func TestCheckMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 200 MB through Check")
	}
	const line = 12 << 20
	total := 200 << 20
	if raceEnabled {
		total = 64 << 20 // the race detector makes it slow, not bigger
	}
	turns := total / line
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	runtime.GC()
	start := time.Now()
	rep, err := Check(&bigTranscript{resultSize: line, turns: turns}, CheckOptions{SessionID: "s"})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lines != int64(1+2*turns) || !rep.Clean() {
		t.Fatalf("generated transcript: %d lines (want %d), problems:\n%s", rep.Lines, 1+2*turns, problemList(rep))
	}
	limit := uint64(2*line + 64<<20)
	t.Logf("%d MiB in %v, heap in use at most %d MiB (limit %d MiB)", turns*line>>20, time.Since(start).Round(time.Millisecond), peak.Load()>>20, limit>>20)
	if peak.Load() > limit {
		t.Errorf("heap in use reached %d MiB, over %d MiB", peak.Load()>>20, limit>>20)
	}
}
