// Package writer owns every transcript file sessiond writes, through one
// writer per session (package session): the Manager routes each request
// to its session's writer, starting one when needed, keeps the registry
// of the live writers and the references callers hold on them, recovers
// what the journal holds at start, and is what the packages around the
// writers (trash, repair, reader, catalog, space) reach them through,
// each by an interface it defines.
//
// The files, by job:
//
//   - manager.go: the Manager, how a request reaches a writer (submit),
//     Close and Stats.
//   - registry.go: the live session writers and the references callers
//     hold on them (acquire, release, follow, retirement): the writers'
//     session.Registry.
//   - write.go: Append (validation in the caller's
//     goroutine), Flush and FlushAll.
//   - recover.go: recovery at start (Recover, CheckJournals, Replay) and
//     the sweep of temp files a crash left.
//   - read.go: consistent snapshots of a session, taken on its writer, for
//     package reader, which serves Read, Follow and the mirror's reads
//     (Snapshots is its reader.Source).
//   - exists.go: what only the writers know of a session beyond its
//     files (a live writer, journaled entries): whether it exists, and
//     what package catalog, which lists and finds sessions, asks of them
//     (catalog.Writers).
//   - metadata.go: titles, tags, archive marks, written on the session's
//     writer through package sidecar.
//   - import.go: a transcript pulled from the fleet, made whole or not at
//     all on its writer.
//   - repair.go: what package repair (Check, Repair, Fork) works
//     through: a session's writer, and the durable replacement of its
//     canonical file.
//   - trash.go: what the trash (package trash: Delete, Restore, the
//     trash's listing and purge) needs of the writers: stopping a
//     session's writers, compacting what they logged.
//   - space.go: how the writers reach package space, which rides out a
//     full disk. The recovery failures status reports are package health's.
//   - config.go: the Config, its defaults, and what the journal and the
//     session writers take of it.
package writer
