package fork

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"

	"github.com/sessiond/sessiond/internal/rawjson"
	"github.com/sessiond/sessiond/internal/transcript"
)

// The jobs, one file each: this file holds the API and the two passes'
// wiring; index.go the first pass (what Session keeps of each entry and of
// the session's metadata records); chain.go the conversation chain a
// resume would load ($p, NMe); cut.go where a fork up to a uuid ends and
// what it copies (the plan); write.go the second pass, which rewrites each
// copied entry and writes the metadata records; ids.go the SDK's session
// id rule.

// Options says how to fork a session (see Session).
type Options struct {
	// SessionID is the source session's id, recorded in every entry's
	// forkedFrom.sessionId; it also picks the metadata records that belong
	// to the session. Required, a UUID.
	SessionID string
	// NewSessionID is the fork's session id. Required, a UUID.
	NewSessionID string
	// UpTo, when set, is the uuid of the last entry to copy (inclusive);
	// an entry whose queued-command source_uuid it is also matches. A uuid
	// the session does not have is an error wrapping errdefs.ErrNotFound.
	UpTo string
	// Title is the fork's title. When empty (or only whitespace) it is
	// "<source title> (fork)", the source title being what forkSession
	// derives: the last custom title, else the AI title, else the first
	// prompt, else "Forked session". A title given is trimmed and checked as
	// NormalizeTitle does, and used without " (fork)".
	Title string
	// SidecarTitle is the title of the source's custom-title.json sidecar
	// (see ParseTitleSidecar), which forkSession reads too; "" for none.
	SidecarTitle string
	// NewUUID makes the fork's entry uuids; nil means random UUIDs v4.
	NewUUID func() string
	// Now gives the time written as the last entry's timestamp and the
	// metadata records'; nil means time.Now.
	Now func() time.Time
}

// Result says what Fork wrote.
type Result struct {
	// Entries is the number of conversation entries written.
	Entries int
	// Lines is the number of lines written, metadata records included.
	Lines int
	// Title is the custom-title written at the end of the fork.
	Title string
}

// Session writes to dst the transcript of a new session branched from the one
// read from src, as the official TypeScript SDK's forkSession (0.3.329)
// writes it, entry for entry and key for key:
//
//   - The conversation entries (user, assistant, attachment, system and
//     progress lines with a string uuid) that are not sidechain entries
//     are kept, up to UpTo when it is set; every other line is dropped:
//     file-history-snapshot, summary, queue-operation, custom-title,
//     ai-title, last-prompt, tag, permission-mode and unknown types.
//   - progress entries are dropped too, and a parentUuid naming one is
//     re-pointed to the first non-progress entry up its chain.
//   - Each entry gets a fresh uuid; parentUuid, logicalParentUuid, the
//     uuids in a compact boundary's preservedMessages / preservedSegment,
//     a queued command's source_uuid and a deferred-tools record's
//     nameOnlyAnnouncements are remapped. A parentUuid naming an entry that
//     is not copied becomes null.
//   - Every entry gets sessionId = NewSessionID, isSidechain false and
//     forkedFrom {sessionId, messageUuid: its old uuid}, and loses
//     teamName, agentName, sessionKind, slug, sourceToolAssistantUUID,
//     summarizedTurnPromptUuids, droppedPromptUuids, sentAsUuid,
//     rowsAheadOfPutBack and turnAttributionKey; an assistant entry gets
//     requestSessionId (its own, else the session it was forked from, else
//     its old sessionId); the last entry's timestamp becomes Now.
//   - Records of the session that carry over are rewritten for the fork:
//     history-suppression and hybrid-organization before the entries,
//     content-replacement, atis-latch, tools-used and relocated after them,
//     then a custom-title with the fork's title.
//
// Keys keep their order (new keys go last, as JavaScript's object spread
// puts them) and values their bytes: entries are edited as ordered JSON,
// never decoded into maps. Insignificant whitespace is removed, and invalid
// UTF-8 becomes U+FFFD, as in the SDK's output. Where the SDK's
// JSON.parse + JSON.stringify would re-spell a value (an escape such as
// \u00e9 or \/, a number such as 1.0 or 1e2, a lone surrogate escape in
// upper case, a duplicated key's spelling), Session keeps the bytes as the
// agent wrote them.
//
// Session reads src twice when it is an io.Seeker (from its current offset):
// once to index the entries (uuid, parent, kind: memory proportional to the
// number of entries, not their size) and once to rewrite them, so memory
// stays about one line plus that index. Any other reader is read into
// memory first. Nothing is written to dst before the first pass succeeds,
// but a failure while writing leaves dst partial: write to a temporary file
// and rename it into place.
//
// Errors: an invalid id or title wraps errdefs.ErrInvalidArgument, as does
// a session with nothing to fork (no conversation entries outside
// sidechains) or with data-flow or derived-from records, which only the
// Claude Code CLI knows how to carry over; an UpTo not in the session wraps
// errdefs.ErrNotFound. Read and write errors are returned as they are.
//
// A fork up to UpTo ends where forkSession ends it: at the first entry
// with that uuid (or queued-command source_uuid) on the conversation chain
// a resume would load, or after it, else anywhere; before a compact
// boundary written after the last message, and before the messages that
// compaction summarised (UUe); with the preserved-message metadata of a
// boundary anchored at the cut dropped (FUe); and without the branches a
// resume of the fork would pick instead of the cut's own, which come
// later in the file (HUe). The chain is found as the SDK finds it ($p:
// latest leaf, compaction relinking, split assistant messages and their
// tool results).
//
// Where Session differs from forkSession:
//   - Values are kept as written (see above) where the SDK re-spells them.
//   - A parentUuid whose chain of progress entries loops is null, where
//     the SDK points it at a progress entry it does not copy.
//   - Sessions with data-flow or derived-from records are refused.
//   - Malformed metadata the SDK would crash on (a truthy
//     preservedMessages without a uuids array) is ignored; values of
//     unexpected JSON types (a numeric parentUuid, an object agentId...)
//     are treated as absent; timestamps are ordered by their bytes, where
//     the SDK uses localeCompare (the same order for ISO 8601 times).
func Session(src io.Reader, dst io.Writer, opt Options) (Result, error) {
	if err := checkSDKSessionID("source session id", opt.SessionID); err != nil {
		return Result{}, err
	}
	if err := checkSDKSessionID("new session id", opt.NewSessionID); err != nil {
		return Result{}, err
	}
	title := rawjson.JSTrim(opt.Title)
	if title != "" {
		var err error
		if title, err = transcript.NormalizeTitle(title); err != nil {
			return Result{}, err
		}
	}
	newUUID := opt.NewUUID
	if newUUID == nil {
		newUUID = uuid.NewString
	}
	now := time.Now
	if opt.Now != nil {
		now = opt.Now
	}

	rs, start, err := rewindable(src)
	if err != nil {
		return Result{}, err
	}
	ix, err := indexFork(rs, opt.SessionID)
	if err != nil {
		return Result{}, err
	}
	ix.summary.SetSidecarTitle(opt.SidecarTitle)
	plan, err := ix.plan(opt.UpTo)
	if err != nil {
		return Result{}, fmt.Errorf("fork of session %s: %w", opt.SessionID, err)
	}
	if title == "" {
		t := ix.summary.ForkTitle()
		if t == "" {
			t = "Forked session"
		}
		title = t + " (fork)"
	}
	if _, err := rs.Seek(start, io.SeekStart); err != nil {
		return Result{}, err
	}

	w := &forkWriter{
		w:      bufio.NewWriterSize(dst, 64<<10),
		plan:   plan,
		src:    opt.SessionID,
		sid:    opt.NewSessionID,
		now:    now().UTC().Format("2006-01-02T15:04:05.000Z"),
		newID:  newUUID,
		newIDs: make(map[string]string, len(plan.out)),
	}
	res, err := w.run(rs, ix, title)
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// rewindable returns src as an io.ReadSeeker and the offset to come back
// to, reading it into memory when it cannot seek.
func rewindable(src io.Reader) (io.ReadSeeker, int64, error) {
	if rs, ok := src.(io.ReadSeeker); ok {
		if off, err := rs.Seek(0, io.SeekCurrent); err == nil {
			return rs, off, nil
		}
	}
	data, err := io.ReadAll(src)
	if err != nil {
		return nil, 0, err
	}
	return bytes.NewReader(data), 0, nil
}
