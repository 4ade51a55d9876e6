// Package writer owns every transcript file sessiond writes. Each session
// (one transcript: a main session or a subagent) has exactly one goroutine
// that owns its log and canonical file; every append, flush and
// compaction of that session runs there, so writes can never interleave.
// Concurrent callers reach the goroutine through a bounded queue; it drains
// what is queued and hands it to the journal shared by every
// session (package journal), which makes it durable together with what other
// sessions queued at that moment, in one write and one sync; only then
// does it acknowledge each caller.
//
// The files, by job:
//
//   - manager.go: the Manager, how a request reaches a writer (submit),
//     Close and Stats.
//   - registry.go: the live session writers and the references callers
//     hold on them (acquire, release, follow, retirement).
//   - session.go: the writer goroutine of one session and its lifecycle;
//     it is given what it needs (sessionEnv), never the Manager.
//   - loop.go: the open writer's event loop: appends, control requests,
//     the idle compaction and retirement, the held replaced file.
//   - state.go: what the writer goroutine owns (state) and publishes to
//     the listing index.
//   - open.go: loading a session from disk as its writer starts: the
//     canonical file's scan and the replay of its log.
//   - append.go: the append path: validation, group commit, deduplication
//     by uuid.
//   - store.go: loading, saving and replaying a session's SessionStore
//     state (batch ids, summary: package sessionstore) on its writer.
//   - compact.go: Flush and compaction (moving logged entries into the
//     canonical file).
//   - foreign.go: lines other programs append meanwhile: absorbed before
//     a compaction, rescued from the file a compaction replaced.
//   - acked.go: what the ledger of acknowledged entries (package ledger)
//     needs of a session: what it holds now, to compare with the entries
//     each transcript was given, and the journal's retained entries, for
//     repair to put back what another program's rewrite dropped.
//   - journal.go: each session's stream in the journal
//     (package journal) behind sessionLog and logStore, and the import of the
//     per-session journals of older releases (package journal): the only
//     user of either.
//   - recover.go: recovery at start (Recover, CheckJournals, Replay) and
//     the sweep of temp files a crash left.
//   - read.go: consistent snapshots of a session, taken on its writer, for
//     package reader, which serves Read, Follow and the mirror's reads
//     (Snapshots is its reader.Source).
//   - exists.go: what only the writers know of a session beyond its
//     files (a live writer, journaled entries): whether it exists, and
//     what package catalog, which lists and finds sessions, asks of them
//     (catalog.Writers).
//   - metadata.go: titles, tags, archive marks and a subagent's
//     .meta.json, written on the session's writer through package sidecar.
//   - repair.go: what package repair (Check, Repair, Fork) works
//     through: a session's writer, and the durable replacement of its
//     canonical file.
//   - trash.go: what the trash (package trash: Delete, Restore, the
//     trash's listing and purge) needs of the writers: stopping a
//     session's writers, compacting what they logged.
//   - space.go: how the writers reach package space, which rides out a
//     full disk (the ballast, compactions deferred until their folder has
//     room and the watcher that does them, the journal's reserve given
//     back). The recovery failures status reports are package health's.
//   - temps.go: the temp files a crashed process left, found once per
//     folder.
//   - config.go: the Config and its defaults.
package writer
