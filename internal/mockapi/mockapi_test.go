package mockapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func msgs(t *testing.T, js string) []Message {
	t.Helper()
	var m []Message
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPairingError: the API's two refusals, with its texts, and a valid
// conversation (system messages in between, results in any order) passes.
func TestPairingError(t *testing.T) {
	for _, c := range []struct{ name, js, want string }{
		{"valid", `[{"role":"user","content":"go"},{"role":"system","content":"env"},
			{"role":"assistant","content":[{"type":"text","text":"x"},{"type":"tool_use","id":"a"},{"type":"tool_use","id":"b"}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"b"},{"type":"tool_result","tool_use_id":"a"}]}]`, ""},
		{"missing result", `[{"role":"user","content":"go"},
			{"role":"assistant","content":[{"type":"tool_use","id":"a"},{"type":"tool_use","id":"b"}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"a"}]}]`,
			"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: b. Each `tool_use` block must have a corresponding `tool_result` block in the next message."},
		{"trailing tool_use", `[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"a"}]},{"role":"user","content":"next"}]`,
			"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: a."},
		{"stray result", `[{"role":"user","content":"go"},{"role":"assistant","content":"hi"},
			{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":"zz"}]}]`,
			"messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: zz. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."},
	} {
		got := PairingError(msgs(t, c.js))
		if (c.want == "") != (got == "") || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func post(t *testing.T, s *Server, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(s.URL+"/v1/messages?beta=true", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestScript: the turns a test relies on, streamed and not, and the 400
// for a broken conversation.
func TestScript(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, body := post(t, s, `{"model":"m","tools":[{}],"messages":[{"role":"user","content":"run them"}]}`)
	if code != 200 || strings.Count(body, `"type":"tool_use"`) != Parallel || !strings.Contains(body, `"stop_reason":"tool_use"`) {
		t.Fatalf("tool turn: %d %s", code, body)
	}
	code, body = post(t, s, `{"model":"m","stream":true,"tools":[{}],"messages":[{"role":"user","content":"run them"}]}`)
	if code != 200 || strings.Count(body, "event: content_block_start") != Parallel+1 || !strings.Contains(body, "event: message_stop") {
		t.Fatalf("streamed tool turn: %d %s", code, body)
	}
	code, body = post(t, s, `{"model":"m","stream":true,"tools":[{}],"messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"a"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a"}]}]}`)
	if code != 200 || !strings.Contains(body, `"text":"done"`) {
		t.Fatalf("after results: %d %s", code, body)
	}
	code, body = post(t, s, `{"model":"m","tools":[{}],"messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"a"}]},{"role":"user","content":"again"}]}`)
	if code != 400 || !strings.Contains(body, "without `tool_result` blocks") || !strings.Contains(body, `"invalid_request_error"`) {
		t.Fatalf("broken pairing: %d %s", code, body)
	}
	kinds := []string{}
	for _, r := range s.Requests() {
		kinds = append(kinds, r.Kind)
	}
	if strings.Join(kinds, ",") != "tools,tools,done,refused" {
		t.Fatalf("kinds %v", kinds)
	}
}

// TestHold: a held kind waits until released.
func TestHold(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	arrived, release := s.Hold("hi")
	done := make(chan string)
	go func() {
		_, b := post(t, s, `{"model":"m","tools":[{}],"messages":[{"role":"user","content":"say hi"}]}`)
		done <- b
	}()
	<-arrived
	select {
	case <-done:
		t.Fatal("answered while held")
	default:
	}
	release()
	if b := <-done; !strings.Contains(b, "hi again") {
		t.Fatalf("after release: %s", b)
	}
}
