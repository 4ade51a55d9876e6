package session

import (
	"github.com/sessiond/sessiond/internal/layout"
	"github.com/sessiond/sessiond/internal/sidecar"
	"github.com/sessiond/sessiond/internal/transcript"
	"github.com/sessiond/sessiond/internal/transcript/listing"
)

// noteAgentMeta remembers the .meta.json sidecar an agent_metadata entry
// of a subagent transcript describes: the SDK mirrors the sidecar to its
// store as such entries, and disk readers (listSubagents) read the file.
func (st *State) noteAgentMeta(line []byte) {
	if st.key.Subpath == "" {
		return
	}
	if meta, ok := transcript.AgentMetaSidecar(line); ok {
		st.agentMeta = meta
	}
}

// saveSidecars writes what the journal about to be replaced holds beyond
// the lines: the store sidecar and a subagent's .meta.json.
func (st *State) saveSidecars() error {
	if err := st.saveStore(); err != nil {
		return err
	}
	if st.agentMeta == nil {
		return nil
	}
	if err := sidecar.WriteAgentMeta(st.fs, st.canonPath, st.agentMeta); err != nil {
		return err
	}
	st.agentMeta = nil
	return nil
}

// WriteSidecar writes a sidecar of st's session, on its writer.
func (st *State) WriteSidecar(name string, body []byte) error {
	if err := sidecar.Write(st.fs, st.Config.Layout.SessionDir(st.key.Main()), name, body); err != nil {
		return err
	}
	if name == sidecar.TitleName {
		// The listing's title comes from it too (when the transcript's
		// tail names none), and its stamp does not cover the sidecar.
		if st.ent != nil {
			st.ent.Sum.SetSidecarTitle(listing.ParseTitleSidecar(body))
			st.Publish()
		} else {
			st.Index.Delete(st.key.Main())
		}
	}
	st.Tell(Change{Key: st.key.Main(), Sidecars: true})
	return nil
}

// TitleSidecar reads the session's title sidecar: "" for none.
func (d *Env) TitleSidecar(key layout.Key) (string, error) {
	return sidecar.Title(d.Config.FS, d.Config.Layout.SessionDir(key.Main()))
}
