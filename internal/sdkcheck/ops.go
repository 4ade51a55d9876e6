package sdkcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// SessionInfo is the SDK's SDKSessionInfo: what listSessions and
// getSessionInfo report for one main session.
type SessionInfo struct {
	SessionID string `json:"sessionId"`
	// Summary is the display title: custom title, else AI title, else last
	// prompt, else summary entry (last 64 KiB only), else first prompt.
	Summary string `json:"summary"`
	// LastModified is the file's mtime in milliseconds since the epoch.
	LastModified int64  `json:"lastModified"`
	FileSize     int64  `json:"fileSize,omitempty"`
	CustomTitle  string `json:"customTitle,omitempty"`
	FirstPrompt  string `json:"firstPrompt,omitempty"`
	GitBranch    string `json:"gitBranch,omitempty"`
	Cwd          string `json:"cwd,omitempty"`
	Tag          string `json:"tag,omitempty"`
	// CreatedAt is the first "timestamp" in the file's first 64 KiB, in ms.
	CreatedAt int64 `json:"createdAt,omitempty"`
	// Archived is nil when the session was never archived.
	Archived *bool `json:"archived,omitempty"`
}

// SessionMessage is the SDK's SessionMessage, as returned by
// getSessionMessages and getSubagentMessages. Decode a message returned
// raw with [DecodeMessage].
type SessionMessage struct {
	Type             string          `json:"type"` // user, assistant, or system
	UUID             string          `json:"uuid"`
	SessionID        string          `json:"session_id"`
	Message          json.RawMessage `json:"message"`
	ParentToolUseID  *string         `json:"parent_tool_use_id"`
	ParentAgentID    *string         `json:"parent_agent_id"`
	IsMeta           bool            `json:"is_meta,omitempty"`
	IsCompactSummary bool            `json:"isCompactSummary,omitempty"`
	Timestamp        string          `json:"timestamp,omitempty"`
}

// DecodeMessage decodes one message of GetSessionMessages or
// GetSubagentMessages.
func DecodeMessage(raw json.RawMessage) (SessionMessage, error) {
	var m SessionMessage
	err := json.Unmarshal(raw, &m)
	return m, err
}

// ListOptions are listSessions' options. Dir "" lists every project.
type ListOptions struct {
	Dir    string `json:"dir,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Offset int    `json:"offset,omitempty"`
	// IncludeWorktrees and IncludeProgrammatic default to true in the SDK.
	IncludeWorktrees    *bool `json:"includeWorktrees,omitempty"`
	IncludeProgrammatic *bool `json:"includeProgrammatic,omitempty"`
}

// MessageOptions are getSessionMessages' options.
type MessageOptions struct {
	Dir                   string `json:"dir,omitempty"`
	Limit                 int    `json:"limit,omitempty"`
	Offset                int    `json:"offset,omitempty"`
	IncludeSystemMessages bool   `json:"includeSystemMessages,omitempty"`
}

// ForkOptions are forkSession's options.
type ForkOptions struct {
	Dir string `json:"dir,omitempty"`
	// UpToMessageID cuts the copy after this message uuid (inclusive).
	UpToMessageID string `json:"upToMessageId,omitempty"`
	// Title is the fork's custom title as given; when empty the SDK uses
	// "<source title> (fork)".
	Title string `json:"title,omitempty"`
}

// StoredKey is one key that importSessionToStore appended to, with its
// entries in order.
type StoredKey struct {
	Key struct {
		ProjectKey string `json:"projectKey"`
		SessionID  string `json:"sessionId"`
		Subpath    string `json:"subpath,omitempty"` // "" for the main transcript
	} `json:"key"`
	Entries []json.RawMessage `json:"entries"`
}

// VersionInfo says what sdkcli.mjs runs.
type VersionInfo struct {
	Version string   `json:"version"` // the SDK package's version
	Node    string   `json:"node"`
	Exports []string `json:"exports"` // the SDK's exported names, sorted
}

// ListSessions lists the main sessions of the project of dir ("" for every
// project), newest first.
func (s *SDK) ListSessions(ctx context.Context, configDir, dir string) ([]SessionInfo, error) {
	return s.ListSessionsWith(ctx, configDir, ListOptions{Dir: dir})
}

// ListSessionsWith is listSessions with every option.
func (s *SDK) ListSessionsWith(ctx context.Context, configDir string, opts ListOptions) ([]SessionInfo, error) {
	var err error
	if opts.Dir, err = absDir(opts.Dir); err != nil {
		return nil, err
	}
	var out []SessionInfo
	err = s.Call(ctx, configDir, withOp("listSessions", opts), &out)
	return out, err
}

// GetSessionInfo reports one session, or nil when the SDK finds none (no
// such file, a sidechain file, or nothing to summarise).
func (s *SDK) GetSessionInfo(ctx context.Context, configDir, sessionID, dir string) (*SessionInfo, error) {
	dir, err := absDir(dir)
	if err != nil {
		return nil, err
	}
	var out *SessionInfo
	err = s.Call(ctx, configDir, sessionReq("getSessionInfo", sessionID, dir), &out)
	return out, err
}

// GetSessionMessages returns the conversation the SDK rebuilds from the
// session's chain: user and assistant messages, oldest first. A missing
// session gives an empty list, not an error.
func (s *SDK) GetSessionMessages(ctx context.Context, configDir, sessionID, dir string) ([]json.RawMessage, error) {
	return s.GetSessionMessagesWith(ctx, configDir, sessionID, MessageOptions{Dir: dir})
}

// GetSessionMessagesWith is getSessionMessages with every option.
func (s *SDK) GetSessionMessagesWith(ctx context.Context, configDir, sessionID string, opts MessageOptions) ([]json.RawMessage, error) {
	var err error
	if opts.Dir, err = absDir(opts.Dir); err != nil {
		return nil, err
	}
	req := withOp("getSessionMessages", opts)
	req["sessionId"] = sessionID
	var out []json.RawMessage
	err = s.Call(ctx, configDir, req, &out)
	return out, err
}

// ListSubagents returns the agent ids of the session's subagent transcripts
// (subagents/**/agent-<id>.jsonl), in directory order.
func (s *SDK) ListSubagents(ctx context.Context, configDir, sessionID, dir string) ([]string, error) {
	dir, err := absDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	err = s.Call(ctx, configDir, sessionReq("listSubagents", sessionID, dir), &out)
	return out, err
}

// GetSubagentMessages returns a subagent's conversation, oldest first; an
// unknown agent gives an empty list.
func (s *SDK) GetSubagentMessages(ctx context.Context, configDir, sessionID, agentID, dir string) ([]json.RawMessage, error) {
	dir, err := absDir(dir)
	if err != nil {
		return nil, err
	}
	req := sessionReq("getSubagentMessages", sessionID, dir)
	req["agentId"] = agentID
	var out []json.RawMessage
	err = s.Call(ctx, configDir, req, &out)
	return out, err
}

// ForkSession copies the session into a new one and returns its id.
func (s *SDK) ForkSession(ctx context.Context, configDir, sessionID string, opts ForkOptions) (string, error) {
	var err error
	if opts.Dir, err = absDir(opts.Dir); err != nil {
		return "", err
	}
	req := withOp("forkSession", opts)
	req["sessionId"] = sessionID
	var out struct {
		SessionID string `json:"sessionId"`
	}
	if err := s.Call(ctx, configDir, req, &out); err != nil {
		return "", err
	}
	return out.SessionID, nil
}

// RenameSession appends a custom-title entry.
func (s *SDK) RenameSession(ctx context.Context, configDir, sessionID, title, dir string) error {
	dir, err := absDir(dir)
	if err != nil {
		return err
	}
	req := sessionReq("renameSession", sessionID, dir)
	req["title"] = title
	return s.Call(ctx, configDir, req, nil)
}

// TagSession appends a tag entry. The SDK refuses an empty tag; use
// [SDK.ClearTag] to clear it.
func (s *SDK) TagSession(ctx context.Context, configDir, sessionID, tag, dir string) error {
	return s.tag(ctx, configDir, sessionID, tag, dir)
}

// ClearTag is tagSession with a null tag.
func (s *SDK) ClearTag(ctx context.Context, configDir, sessionID, dir string) error {
	return s.tag(ctx, configDir, sessionID, nil, dir)
}

func (s *SDK) tag(ctx context.Context, configDir, sessionID string, tag any, dir string) error {
	dir, err := absDir(dir)
	if err != nil {
		return err
	}
	req := sessionReq("tagSession", sessionID, dir)
	req["tag"] = tag
	return s.Call(ctx, configDir, req, nil)
}

// DeleteSession removes the transcript and its <session-id>/ folder.
func (s *SDK) DeleteSession(ctx context.Context, configDir, sessionID, dir string) error {
	return s.simple(ctx, "deleteSession", configDir, sessionID, dir)
}

// ArchiveSession writes <session-id>/archived.json.
func (s *SDK) ArchiveSession(ctx context.Context, configDir, sessionID, dir string) error {
	return s.simple(ctx, "archiveSession", configDir, sessionID, dir)
}

// UnarchiveSession marks the session unarchived.
func (s *SDK) UnarchiveSession(ctx context.Context, configDir, sessionID, dir string) error {
	return s.simple(ctx, "unarchiveSession", configDir, sessionID, dir)
}

func (s *SDK) simple(ctx context.Context, op, configDir, sessionID, dir string) error {
	dir, err := absDir(dir)
	if err != nil {
		return err
	}
	return s.Call(ctx, configDir, sessionReq(op, sessionID, dir), nil)
}

// ImportSessionToStore runs importSessionToStore (subagents included) into
// the SDK's InMemorySessionStore and returns what it received: what the SDK
// would mirror from these files to a SessionStore.
func (s *SDK) ImportSessionToStore(ctx context.Context, configDir, sessionID, dir string) ([]StoredKey, error) {
	dir, err := absDir(dir)
	if err != nil {
		return nil, err
	}
	var out []StoredKey
	err = s.Call(ctx, configDir, sessionReq("importSessionToStore", sessionID, dir), &out)
	return out, err
}

// Version reports the SDK version that sdkcli.mjs loads and its exports.
func (s *SDK) Version(ctx context.Context) (VersionInfo, error) {
	var out VersionInfo
	empty, err := os.MkdirTemp("", "sdkcheck-config-")
	if err != nil {
		return out, err
	}
	defer os.RemoveAll(empty)
	err = s.Call(ctx, empty, map[string]any{"op": "version"}, &out)
	return out, err
}

// absDir makes a project folder absolute: the SDK would resolve a relative
// one against its own working directory, which is not the caller's.
func absDir(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("sdkcheck: %w", err)
	}
	return abs, nil
}

func sessionReq(op, sessionID, dir string) map[string]any {
	req := map[string]any{"op": op, "sessionId": sessionID}
	if dir != "" {
		req["dir"] = dir
	}
	return req
}

// withOp turns an options struct into a request object for op.
func withOp(op string, opts any) map[string]any {
	b, err := json.Marshal(opts)
	if err != nil {
		panic(err) // option structs always encode
	}
	req := map[string]any{}
	if err := json.Unmarshal(b, &req); err != nil {
		panic(err)
	}
	req["op"] = op
	return req
}
