// Package trash keeps the sessions sessiond deletes. Delete moves a
// session's files (its transcript, its session folder, a subagent's
// sidecars) into StateDir/trash, or removes them; Restore moves them back,
// merging the trashed entries in front of a session's own when its agent
// recreated it after the delete. Both are written down first as a durable
// intent, so a crash or a failing disk midway is finished by the next try
// or the next start, never leaving a session half in place. The trash is
// listed (List, Projects, Usage) and purged after its retention (Purge,
// RunPurge).
//
// The trash does not write transcripts: it asks the session writers,
// through the Sessions interface they implement, to stop a session's
// writers and compact what they logged before its files move, and the
// writers ask it (Admit) whether a session may take a writer.
//
// The files, by job:
//
//   - trash.go: the Trash, what it needs of the writers, the lock on a
//     session's family, and Delete.
//   - intent.go: the durable intents, finished at start by Recover.
//   - restore.go and merge.go: Restore, and the merge of trashed copies
//     into a session that exists again.
//   - list.go: the trash's entries, their listing and usage.
//   - purge.go: removing copies past their retention.
package trash
