package harness

import (
	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/layout"
)

// TranscriptPath is where sessiond, serving root (Status's root), keeps the
// canonical JSONL file of s: the file the official readers open.
func TranscriptPath(root string, s client.Session) string {
	return layout.Layout{Root: root}.TranscriptPath(layout.Key{ProjectKey: s.ProjectKey, SessionID: s.ID})
}
