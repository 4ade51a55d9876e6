// Package session is the per-session actor: each session (one transcript:
// a main session or a subagent) has exactly one goroutine, its Writer,
// that owns its stream in the journal and its canonical file; every
// append, flush and compaction of that session runs there, so writes can
// never interleave. Callers reach the goroutine through a bounded queue;
// it drains what is queued and hands it to the journal shared by every
// session (package stream over package journal), which makes it durable
// together with what other sessions queued at that moment, in one write
// and one sync; only then does it acknowledge each caller. The Writer is
// given what it needs in an Env, and reaches the registry that holds it
// only through Registry, never the manager that runs it. The file work
// that needs none of its state is package files.
//
// The files, by job:
//
//   - writer.go: the writer goroutine of one session, its requests and
//     its lifecycle (phase).
//   - loop.go: the open writer's event loop: appends, control requests,
//     the idle compaction and retirement, the held replaced file.
//   - state.go: what the writer goroutine owns (State) and publishes to
//     the listing index; the Env it shares with the others.
//   - open.go: loading a session from disk as its writer starts: the
//     canonical file's scan and the replay of its stream.
//   - append.go: the group commit: deduplication by batch id and uuid,
//     one write and one sync, the acknowledgements.
//   - compact.go: compaction (moving logged entries into the canonical
//     file).
//   - foreign.go: lines other programs append meanwhile: absorbed before
//     a compaction, rescued from the file a compaction replaced.
//   - shared.go: the file the agent's CLI writes too (on the defaults of
//     both sides): its lines taken in before a mirrored batch is
//     deduplicated, those without uuid matched by value, and what is
//     matched recorded in the ledger so that it outlives the writer.
//   - store.go, sidecars.go: the SessionStore state (package
//     sessionstore), titles, archive marks and a subagent's .meta.json.
//   - acked.go: what the ledger of acknowledged entries (package ledger)
//     needs of a session, and what repair puts back.
//   - rewrite.go: the canonical file replaced or made whole on the
//     writer (repair, import), durably.
//   - read.go: a snapshot of the session for package reader.
//   - readstate.go: copies of damaged state kept aside.
//   - changes.go: what Config.Changed is told.
//   - config.go: the settings the writers take.
package session
