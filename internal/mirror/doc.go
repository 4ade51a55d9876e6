// Package mirror copies every transcript sessiond keeps (main sessions and
// subagents) into PostgreSQL, in the table layout of the official Python
// SDK's reference SessionStore adapter: whatever a program using that
// adapter writes, sessiond reads, and the other way round. The local
// journal stays the source of truth: appends never wait for PostgreSQL.
//
// # How it follows the transcripts
//
// The writers tell the mirror what changed (writer.Config.Changed: a
// non-blocking call that marks the transcript and wakes a worker; changes
// that come while it is queued coalesce). At start every local transcript
// is queued too, and compared with its cursor: what was appended while
// sessiond or PostgreSQL was down, or rewritten meanwhile, is mirrored
// then: each transcript is read whole once, in the background, to check
// its digest. A few workers (Config.Workers) each take one transcript at a
// time.
//
// # Exactly once
//
// A per-transcript cursor (sessiond_cursors) says how many of the
// transcript's lines are in the table, with the SHA-256 of their bytes.
// It advances in the transaction that inserts the rows it covers, and that
// transaction first locks it and checks it is the one the mirror read: a
// crash of sessiond or of PostgreSQL at any point leaves the rows and the
// cursor together, so nothing is lost or written twice; a commit whose
// answer was lost is found out by reading the cursor again.
//
// # Rewrites and deletes
//
// Before appending after the cursor, the mirror checks that the
// transcript still starts with the lines the cursor covers: their digest
// must match (it reads them again, unless the writer's lineage vouches
// that they have not moved since it last did). When they do not (a
// repair, a restore that merged copies, another program's rewrite), the
// transcript is replaced in one transaction: its rows and lines are
// deleted, every current line is inserted, and the cursor starts over
// with its generation counted up; readers see the old rows or the new,
// never a mix. A transcript with fewer lines than its cursor covers,
// which this mirror did not check here, is compared with the rows
// instead: a copy pulled before another machine wrote more is their
// first lines, behind and not rewritten, and nothing is written for it
// (nor a lease taken, which would fence this machine while the other
// holds it). A transcript deleted here (sessionctl delete, the SDK's
// deleteSession) loses its rows and cursor; a main session's delete takes
// its subagents' rows along, as the reference adapter's delete does. A
// restore from the trash mirrors the transcripts it brings back (when
// their content is what the rows hold, nothing is written). Titles, tags
// and other metadata are transcript entries, so they are mirrored as
// such; a fork is a new session, mirrored as any.
//
// # Sidecars
//
// A session's sidecar files (sidecar.Names: archived.json, the
// archive mark; custom-title.json, the official tools' title file) are
// kept equal, byte for byte, in sessiond_sidecars (sidecars.go): one
// written here is upserted with its mtime, one removed here is deleted.
// They are compared when the writer says one was written
// (writer.Change.Sidecars), when a restore brings the session back, and
// at start for every local session, against the rows loaded in one query
// with the cursors; nothing is written, and no lease taken, when they are
// equal. A write goes under the session's lease like rows (Leases.Ensure,
// then fence in the transaction, the files read again under it), so a
// fenced machine writes none; a main transcript's delete takes its
// session's sidecars along. A pull writes them after the transcripts
// (Puller.pullSidecars says which wins when they differ); List
// reads the archive mark against the last main row that is a user
// prompt (FleetSession.Archived) and the title file.
//
// Lines that are not JSON objects (a torn tail, another program's
// garbage) are counted by the cursor but get no row: jsonb takes only
// JSON, and the reference adapter's entries are objects. PostgreSQL's
// jsonb cannot hold U+0000: a \u0000 escape is stored as \ufffd in the
// entry, and sessiond_lines keeps the exact line.
//
// Rows another program wrote for a transcript that has no cursor are
// left alone, and the transcript is not mirrored (Status says so) until
// they are removed.
//
// # Pulling
//
// Fetch reads a session this machine lacks from the table, in one
// snapshot: each row's exact line (sessiond_lines) where sessiond wrote
// it, else its entry compact with "type" first (TypeFirst). Rows no
// cursor covers (another program's) get one in the same transaction, so
// that once the pulled file is here the mirror appends after them; rows
// sessiond wrote already have theirs, and the pulled file matches its
// digest. The session's sidecars come in the same snapshot. List is the
// reference adapter's list_sessions with sizes, titles and the archive
// mark beside it.
//
// Puller decides when a session comes down and writes it here (through
// the writers: Import, Append, WriteSidecar): on request, before an
// append or a read of a session that is here only in PostgreSQL, and when
// this machine takes a session over from another. It refuses a local
// copy that differs from PostgreSQL's before anything is written, and
// says which sidecar wins when they differ (pullSidecars).
//
// # One writer per session across machines
//
// A session (with its subagents) is leased to the machine that appends
// to it (package lease): the lease's CheckAppend is the writers'
// AppendGate. Every transaction that writes a transcript's rows first
// makes sure the lease is held (Leases.Ensure, in a transaction of its
// own), then, with the cursor locked, locks the lease row and checks
// that this machine's fencing token is still the current one (fence): a
// former holder paused past its expiry cannot write after a takeover; it
// is fenced, reported as the mirror's last error, and refuses appends to
// the session. A session taken over from another machine is caught up
// first (the Puller is the leases' takeover hook); until it is, its rows
// are not written from here.
package mirror
