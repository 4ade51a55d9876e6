package sdkcheck

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// msg builds a message as getSessionMessages returns it; blocks are JSON
// content blocks, or one plain string for string content.
func msg(typ, uuid string, blocks ...string) json.RawMessage {
	content := "[" + strings.Join(blocks, ",") + "]"
	if len(blocks) == 1 && !strings.HasPrefix(blocks[0], "{") {
		b, _ := json.Marshal(blocks[0])
		content = string(b)
	}
	return json.RawMessage(fmt.Sprintf(`{"type":%q,"uuid":%q,"message":{"role":%q,"content":%s}}`, typ, uuid, typ, content))
}

func toolUse(id string) string {
	return fmt.Sprintf(`{"type":"tool_use","id":%q,"name":"Bash","input":{}}`, id)
}
func toolResult(id string) string {
	return fmt.Sprintf(`{"type":"tool_result","tool_use_id":%q,"content":"ok","is_error":false}`, id)
}

const text = `{"type":"text","text":"hi"}`

func TestToolPairingProblems(t *testing.T) {
	tests := []struct {
		name     string
		messages []json.RawMessage
		want     []string // substrings, one per expected problem, in order
	}{
		{name: "empty"},
		{
			name: "plain conversation",
			messages: []json.RawMessage{
				msg("user", "u1", "hello"), msg("assistant", "a1", text), msg("user", "u2", "bye"),
			},
		},
		{
			name: "paired",
			messages: []json.RawMessage{
				msg("user", "u1", "run it"), msg("assistant", "a1", text, toolUse("t1")),
				msg("user", "u2", toolResult("t1")), msg("assistant", "a2", text),
			},
		},
		{
			name: "one response split over lines, parallel results on separate lines",
			messages: []json.RawMessage{
				msg("user", "u1", "go"),
				msg("assistant", "a1", text), msg("assistant", "a2", toolUse("t1")), msg("assistant", "a3", toolUse("t2")),
				msg("user", "u2", toolResult("t2")), msg("user", "u3", toolResult("t1")),
				msg("assistant", "a4", text),
			},
		},
		{
			name: "other entry types are skipped",
			messages: []json.RawMessage{
				msg("assistant", "a1", toolUse("t1")),
				json.RawMessage(`{"type":"progress","uuid":"p1","data":{}}`),
				json.RawMessage(`{"type":"system","uuid":"s1","subtype":"local_command","content":"x"}`),
				msg("user", "u1", toolResult("t1")),
			},
		},
		{
			name: "missing result",
			messages: []json.RawMessage{
				msg("assistant", "a1", toolUse("t1"), toolUse("t2")), msg("user", "u1", toolResult("t1")),
				msg("assistant", "a2", text),
			},
			want: []string{"messages[0] (uuid a1): tool_use t2 (Bash) has no tool_result in the next user message"},
		},
		{
			name: "result one turn too late",
			messages: []json.RawMessage{
				msg("assistant", "a1", toolUse("t1")), msg("user", "u1", "what?"),
				msg("assistant", "a2", text), msg("user", "u2", toolResult("t1")),
			},
			want: []string{
				"messages[0] (uuid a1): tool_use t1 (Bash) has no tool_result",
				"messages[3] (uuid u2): tool_result for t1 answers no tool_use",
			},
		},
		{
			name: "trailing tool_use, as a session cut off while a tool ran",
			messages: []json.RawMessage{
				msg("user", "u1", "go"), msg("assistant", "a1", text), msg("assistant", "a2", toolUse("t9")),
			},
			want: []string{"messages[2] (uuid a2): tool_use t9 (Bash) has no tool_result (the conversation ends with it)"},
		},
		{
			name: "stray result at the start",
			messages: []json.RawMessage{
				msg("user", "u1", toolResult("t1")), msg("assistant", "a1", text),
			},
			want: []string{"messages[0] (uuid u1): tool_result for t1 answers no tool_use"},
		},
		{
			name: "duplicate result",
			messages: []json.RawMessage{
				msg("assistant", "a1", toolUse("t1")), msg("user", "u1", toolResult("t1")), msg("user", "u2", toolResult("t1")),
			},
			want: []string{"messages[2] (uuid u2): second tool_result for t1"},
		},
		{
			name: "duplicate tool_use id",
			messages: []json.RawMessage{
				msg("assistant", "a1", toolUse("t1")), msg("user", "u1", toolResult("t1")),
				msg("assistant", "a2", toolUse("t1")), msg("user", "u2", toolResult("t1")),
			},
			want: []string{
				"messages[2] (uuid a2): tool_use id t1 repeats the one of messages[0]",
				"messages[3] (uuid u2): tool_result for t1 answers no tool_use",
			},
		},
		{
			name:     "not JSON",
			messages: []json.RawMessage{json.RawMessage(`{"type":`)},
			want:     []string{"messages[0]: not a JSON object"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ToolPairingProblems(tc.messages)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}
