// Package mockapi is a stand-in for the Anthropic Messages API on
// 127.0.0.1, for tests that drive the real Claude Code CLI offline. It
// answers POST /v1/messages (streamed as server-sent events, or as one JSON
// body) with scripted turns chosen from the request alone, and it refuses,
// as the real API does, with its 400 texts, a conversation whose tool
// pairing is broken: the failure a lost transcript line causes on resume.
//
// The script, by the last user message of a request:
//   - a request without tools (the CLI's side tasks, such as naming the
//     session): a short text, or {"title":...} when a JSON schema is asked;
//   - tool results: the text "done";
//   - a background agent's <task-notification>: "noted";
//   - "SUBAGENT_TASK" (a subagent's prompt): "subagent says hi";
//   - "use a subagent": one Agent tool call whose prompt is SUBAGENT_TASK;
//   - "say hi": "hi again";
//   - anything else: a text and Parallel parallel Bash tool calls, the i-th
//     running `echo i` (with "slow", `sleep 0.3*i; echo i`).
package mockapi

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Parallel is how many Bash tool calls a tool turn asks for.
const Parallel = 8

// Request is one /v1/messages request the server received.
type Request struct {
	Messages []Message
	Tools    int
	Stream   bool
	// Kind is the script rule it matched ("tools", "done", "subagent"...),
	// or "refused" with Refusal set when its pairing was broken.
	Kind    string
	Refusal string
}

// Message is one message of a request.
type Message struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// Content is a message's content: a string, or blocks.
type Content []Block

// Block is one content block, with the fields the script and the pairing
// check look at.
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
}

// UnmarshalJSON accepts a string as one text block.
func (c *Content) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = Content{{Type: "text", Text: s}}
		return nil
	}
	var blocks []Block
	if err := json.Unmarshal(b, &blocks); err != nil {
		return err
	}
	*c = blocks
	return nil
}

// Server is a running mock.
type Server struct {
	URL string

	srv  *http.Server
	ln   net.Listener
	mu   sync.Mutex
	reqs []Request
	hold map[string]*gate // kind -> the gate requests of that kind wait at
	ids  atomic.Int64
}

// Start serves on a free port of 127.0.0.1 until Close.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), ln: ln, hold: map[string]*gate{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/messages", s.messages)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			return
		}
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"not found"}}`, http.StatusNotFound)
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// gate holds requests of one kind: arrived closes when the first comes,
// open when they may go on. Each closes once, whoever closes it.
type gate struct {
	arrived, open         chan struct{}
	arrivedOnce, openOnce sync.Once
}

func (g *gate) arrive()  { g.arrivedOnce.Do(func() { close(g.arrived) }) }
func (g *gate) release() { g.openOnce.Do(func() { close(g.open) }) }

// Close stops the server, releasing held requests.
func (s *Server) Close() error {
	s.mu.Lock()
	for k, g := range s.hold {
		g.release()
		delete(s.hold, k)
	}
	s.mu.Unlock()
	return s.srv.Close()
}

// Requests returns what was received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Hold makes requests of kind wait until the returned release is called
// (or the client goes away), so a test can act while a turn is in flight.
// Arrived is closed when the first such request arrives.
func (s *Server) Hold(kind string) (arrived <-chan struct{}, release func()) {
	g := &gate{arrived: make(chan struct{}), open: make(chan struct{})}
	s.mu.Lock()
	s.hold[kind] = g
	s.mu.Unlock()
	return g.arrived, func() {
		s.mu.Lock()
		if s.hold[kind] == g {
			delete(s.hold, kind)
		}
		s.mu.Unlock()
		g.release()
	}
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var body struct {
		Messages     []Message         `json:"messages"`
		Tools        []json.RawMessage `json:"tools"`
		Stream       bool              `json:"stream"`
		Model        string            `json:"model"`
		OutputConfig struct {
			Format struct {
				Type string `json:"type"`
			} `json:"format"`
		} `json:"output_config"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "request body is not JSON: "+err.Error())
		return
	}
	req := Request{Messages: body.Messages, Tools: len(body.Tools), Stream: body.Stream}
	if problem := PairingError(body.Messages); problem != "" {
		req.Kind, req.Refusal = "refused", problem
		s.record(req)
		apiError(w, http.StatusBadRequest, "invalid_request_error", problem)
		return
	}
	blocks, stop := s.script(&req, len(body.Tools) == 0, body.OutputConfig.Format.Type == "json_schema")
	s.record(req)
	s.mu.Lock()
	g, held := s.hold[req.Kind]
	s.mu.Unlock()
	if held {
		g.arrive()
		select {
		case <-g.open:
		case <-r.Context().Done():
			return
		}
	}
	model := body.Model
	if model == "" {
		model = "claude-mock"
	}
	id := fmt.Sprintf("msg_mock%06d", s.ids.Add(1))
	if !body.Stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
			"content": blocks, "stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]int{"input_tokens": 10, "output_tokens": 10}})
		return
	}
	stream(w, id, model, blocks, stop)
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	s.mu.Unlock()
}

// script picks the answer for a request and names the rule in req.Kind.
func (s *Server) script(req *Request, noTools, wantJSON bool) ([]map[string]any, string) {
	text := func(t string) []map[string]any { return []map[string]any{{"type": "text", "text": t}} }
	last := lastUser(req.Messages)
	var prompt string
	results := false
	for _, b := range last.Content {
		switch b.Type {
		case "text":
			prompt += b.Text + "\n"
		case "tool_result":
			results = true
		}
	}
	switch {
	case noTools:
		req.Kind = "side"
		if wantJSON {
			return text(`{"title":"Mock session"}`), "end_turn"
		}
		return text("mock side answer"), "end_turn"
	case results:
		req.Kind = "done"
		return text("done"), "end_turn"
	case strings.Contains(prompt, "<task-notification>"):
		req.Kind = "notification"
		return text("noted"), "end_turn"
	case strings.Contains(prompt, "SUBAGENT_TASK"):
		req.Kind = "subagent"
		return text("subagent says hi"), "end_turn"
	case strings.Contains(prompt, "use a subagent"):
		req.Kind = "spawn"
		input, _ := json.Marshal(map[string]any{"description": "mock subagent", "prompt": "SUBAGENT_TASK: say hi",
			"subagent_type": "general-purpose", "run_in_background": false})
		return []map[string]any{{"type": "text", "text": "Starting a subagent."},
			{"type": "tool_use", "id": s.toolID(), "name": "Agent", "input": json.RawMessage(input)}}, "tool_use"
	case strings.Contains(prompt, "say hi"):
		req.Kind = "hi"
		return text("hi again"), "end_turn"
	}
	req.Kind = "tools"
	out := text("Running the commands.")
	for i := 1; i <= Parallel; i++ {
		cmd := fmt.Sprintf("echo %d", i)
		if strings.Contains(prompt, "slow") {
			cmd = fmt.Sprintf("sleep %.1f; echo %d", 0.3*float64(i), i)
		}
		input, _ := json.Marshal(map[string]string{"command": cmd, "description": cmd})
		out = append(out, map[string]any{"type": "tool_use", "id": s.toolID(), "name": "Bash", "input": json.RawMessage(input)})
	}
	return out, "tool_use"
}

func (s *Server) toolID() string { return fmt.Sprintf("toolu_mock%08d", s.ids.Add(1)) }

func lastUser(msgs []Message) Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i]
		}
	}
	return Message{}
}

// PairingError checks a request's messages the way the Messages API does
// and returns its error text, or "": every tool_use of an assistant message
// must be answered by a tool_result in the message right after it, and
// every tool_result must answer a tool_use of the message right before it.
func PairingError(msgs []Message) string {
	uses := func(m Message) map[string]bool {
		ids := map[string]bool{}
		if m.Role == "assistant" {
			for _, b := range m.Content {
				if b.Type == "tool_use" {
					ids[b.ID] = true
				}
			}
		}
		return ids
	}
	for i, m := range msgs {
		want := uses(m)
		if len(want) == 0 {
			continue
		}
		var missing []string
		for _, b := range m.Content {
			if b.Type != "tool_use" {
				continue
			}
			found := false
			if i+1 < len(msgs) && msgs[i+1].Role == "user" {
				for _, r := range msgs[i+1].Content {
					if r.Type == "tool_result" && r.ToolUseID == b.ID {
						found = true
					}
				}
			}
			if !found {
				missing = append(missing, b.ID)
			}
		}
		if len(missing) > 0 {
			return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
				i, strings.Join(missing, ", "))
		}
	}
	for i, m := range msgs {
		if m.Role != "user" {
			continue
		}
		var prev map[string]bool
		if i > 0 {
			prev = uses(msgs[i-1])
		}
		for j, b := range m.Content {
			if b.Type == "tool_result" && !prev[b.ToolUseID] {
				return fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
					i, j, b.ToolUseID)
			}
		}
	}
	return ""
}

func apiError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}

// stream writes the answer as the API's server-sent events.
func stream(w http.ResponseWriter, id, model string, blocks []map[string]any, stop string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	event := func(typ string, data map[string]any) {
		data["type"] = typ
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
		if fl != nil {
			fl.Flush()
		}
	}
	event("message_start", map[string]any{"message": map[string]any{"id": id, "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
	for i, b := range blocks {
		switch b["type"] {
		case "text":
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": b["text"]}})
		case "tool_use":
			event("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			event("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(b["input"].(json.RawMessage))}})
		}
		event("content_block_stop", map[string]any{"index": i})
	}
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": 20}})
	event("message_stop", map[string]any{})
}
