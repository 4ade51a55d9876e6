package sdkcheck

import (
	"encoding/json"
	"fmt"
)

// ToolPairingProblems checks the rule the Messages API enforces when a
// conversation is sent (and so when a session is resumed): every tool_use
// block of an assistant turn is answered by a tool_result block with the same
// id in the user turn right after it, and every tool_result answers a
// tool_use of the assistant turn right before it. A turn is a run of
// consecutive messages with the same role, as the API merges them: one
// response is often written as several assistant lines, and parallel tool
// results as several user lines. Messages of other types (system, progress,
// metadata) are skipped.
//
// messages is a conversation in order: what GetSessionMessages returns, or
// the entries of one chain. A raw transcript with sidechain entries or
// several branches is not one conversation.
//
// It returns one line per problem, naming the message index, uuid and tool
// id; none for a conversation the API would accept. A trailing tool_use with
// no result (a session cut off while a tool ran) is a problem: the next
// prompt would be rejected.
func ToolPairingProblems(messages []json.RawMessage) []string {
	var problems []string
	type use struct {
		index int
		uuid  string
		name  string
	}
	var (
		pending  map[string]use // tool_use ids of the last assistant turn
		order    []string       // their order, for stable output
		answered map[string]bool
		seen     = map[string]int{} // every tool_use id -> first message index
		lastRole string
	)
	// closeAssistantTurn reports the tool_uses the user turn after it left
	// unanswered.
	closeAssistantTurn := func(why string) {
		for _, id := range order {
			if !answered[id] {
				u := pending[id]
				problems = append(problems, fmt.Sprintf("messages[%d] (uuid %s): tool_use %s (%s) has no tool_result %s", u.index, u.uuid, id, u.name, why))
			}
		}
		pending, order, answered = nil, nil, nil
	}
	for i, raw := range messages {
		m, blocks, problem := pairingMessage(i, raw)
		if problem != "" {
			problems = append(problems, problem)
			continue
		}
		if m.Type == "" {
			continue // neither user nor assistant
		}
		switch m.Type {
		case "assistant":
			if lastRole == "user" {
				// The previous user turn is over: whatever it did not answer
				// of the assistant turn before it never will be.
				closeAssistantTurn("in the next user message")
			}
			if lastRole != "assistant" {
				pending, order, answered = map[string]use{}, nil, map[string]bool{}
			}
			for _, b := range blocks {
				if b.Type != "tool_use" {
					continue
				}
				if first, dup := seen[b.ID]; dup {
					problems = append(problems, fmt.Sprintf("messages[%d] (uuid %s): tool_use id %s repeats the one of messages[%d]", i, m.UUID, b.ID, first))
					continue
				}
				seen[b.ID] = i
				pending[b.ID] = use{index: i, uuid: m.UUID, name: b.Name}
				order = append(order, b.ID)
			}
		case "user":
			for _, b := range blocks {
				if b.Type != "tool_result" {
					continue
				}
				if _, ok := pending[b.ToolUseID]; !ok || lastRole == "" {
					problems = append(problems, fmt.Sprintf("messages[%d] (uuid %s): tool_result for %s answers no tool_use of the assistant message right before it", i, m.UUID, b.ToolUseID))
					continue
				}
				if answered[b.ToolUseID] {
					problems = append(problems, fmt.Sprintf("messages[%d] (uuid %s): second tool_result for %s", i, m.UUID, b.ToolUseID))
					continue
				}
				answered[b.ToolUseID] = true
			}
		}
		lastRole = m.Type
	}
	if lastRole == "assistant" {
		closeAssistantTurn("(the conversation ends with it)")
	} else {
		closeAssistantTurn("in the next user message")
	}
	return problems
}

// pairingBlock is what the pairing check reads of a content block.
type pairingBlock struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	ToolUseID string `json:"tool_use_id"`
}

// pairingMessage reads messages[i]'s type, uuid and content blocks, or
// says why it cannot; a message that is neither user nor assistant has
// type "" for the check to skip.
func pairingMessage(i int, raw json.RawMessage) (m struct{ Type, UUID string }, blocks []pairingBlock, problem string) {
	var msg struct {
		Type    string `json:"type"`
		UUID    string `json:"uuid"`
		Message *struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		return m, nil, fmt.Sprintf("messages[%d]: not a JSON object: %v", i, err)
	}
	if msg.Type != "user" && msg.Type != "assistant" {
		return m, nil, ""
	}
	m.Type, m.UUID = msg.Type, msg.UUID
	if msg.Message != nil && len(msg.Message.Content) > 0 && msg.Message.Content[0] == '[' {
		if err := json.Unmarshal(msg.Message.Content, &blocks); err != nil {
			return m, nil, fmt.Sprintf("messages[%d] (uuid %s): content is not a list of blocks: %v", i, msg.UUID, err)
		}
	}
	return m, blocks, ""
}
