package files

import (
	"bytes"
	"errors"
	"io"

	"github.com/sessiond/sessiond/internal/fsys"
)

// Slots bounds the replaced files held open at once, every session
// together.
type Slots chan struct{}

// NewSlots returns n slots.
func NewSlots(n int) Slots { return make(Slots, n) }

// Lease takes a write lease on f, the canonical file a compaction is about
// to replace: granted, it says no other open file refers to f, and an
// open of f while it is held waits until Unlease. It reports whether it
// has one; unsupported is the error of a filesystem or process that takes
// no leases at all (nil when another program merely has f open).
func Lease(f fsys.File) (leased bool, unsupported error) {
	if f == nil {
		return false, nil
	}
	err := fsys.Lease(f)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fsys.ErrLeaseConflict):
		return false, nil
	}
	return false, err
}

// Unlease gives up the lease Lease took on f and reports whether it was
// whole: nobody opened f since.
func Unlease(f fsys.File) bool {
	whole, err := fsys.Unlease(f)
	return err == nil && whole
}

// Held is the replaced file one session holds, if any: what lies in it
// past Off is what other programs appended after the compaction copied
// it. Only the session's writer goroutine uses it.
type Held struct {
	slots Slots
	f     fsys.File
	off   int64
	// size and tail name what f held when the compaction copied it: a
	// file that no longer starts with that was rewritten, not appended
	// to.
	size int64
	tail uint32
	slot bool
}

// NewHeld returns a Held that takes its slots from slots.
func NewHeld(slots Slots) Held { return Held{slots: slots} }

// File is the held file, nil when none is.
func (h *Held) File() fsys.File { return h.f }

// Hold keeps f, which held size bytes with the tail checksum tail when a
// compaction copied it, letting go of any file held before. A file that
// no longer starts with those bytes is not held: it is returned, for the
// caller to keep a copy of and close. A file that cannot be read now is
// held all the same, and the error returned: Late looks again.
func (h *Held) Hold(f fsys.File, size int64, tail uint32) (rewritten fsys.File, err error) {
	h.Drop()
	ok, err := Intact(f, size, tail)
	if err == nil && !ok {
		return f, nil
	}
	h.f, h.off, h.size, h.tail = f, size, size, tail
	return nil, err
}

// TakeSlot takes one of the slots for the held file, or reports that they
// are all taken.
func (h *Held) TakeSlot() bool {
	select {
	case h.slots <- struct{}{}:
		h.slot = true
		return true
	default:
		return false
	}
}

func (h *Held) freeSlot() {
	if h.slot {
		h.slot = false
		<-h.slots
	}
}

// Drop lets the held file go.
func (h *Held) Drop() {
	if h.f != nil {
		h.f.Close()
		h.f = nil
	}
	h.freeSlot()
}

// Late reads what was appended to the held file past what was read
// before: whole lines only, unless final (the file is let go next, and a
// line cut short is kept as it is). Advance says how much was taken. A
// file rewritten since Hold (a program that opened it before the rename
// saved its copy into it later) is let go and returned: what lies past
// the offset is a slice of another version, not lines appended.
func (h *Held) Late(final bool) (data []byte, rewritten fsys.File, err error) {
	if h.f == nil {
		return nil, nil, nil
	}
	ok, err := Intact(h.f, h.size, h.tail)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		f := h.f
		h.f = nil
		h.freeSlot()
		return nil, f, nil
	}
	fi, err := h.f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() <= h.off {
		return nil, nil, nil
	}
	if data, err = readPast(h.f, h.off); err != nil {
		return nil, nil, err
	}
	if !final {
		data = data[:bytes.LastIndexByte(data, '\n')+1]
	}
	return data, nil, nil
}

// Advance records that n more bytes of the held file were taken.
func (h *Held) Advance(n int) { h.off += int64(n) }

// Replacement is how a compaction's rename left the file it replaced.
type Replacement struct {
	Old bool // there was a non-empty file to replace
	// Alone: a lease on it stayed whole across the rename, so nothing can
	// be written to it any more.
	Alone bool
	// Closed: it is closed already, alone and still what was copied;
	// Tail is what it held past the copy.
	Closed bool
	Tail   []byte
}

// RenameOver renames the temp file at tmpPath over path, whose file src
// (nil when there was none, or an empty one) held size bytes with the
// tail checksum tail when they were copied; leased says a lease on src
// was taken (Lease) before. From the lease on, another program's open of
// the old file waits for the rename and reaches the old file then, so a
// lease still whole after it says nobody opened it. Such a file is read
// past the copy and closed at once, before the caller syncs the folder:
// no replaced file stays open longer than it takes to read its end.
func RenameOver(fs fsys.FS, tmpPath, path string, src fsys.File, size int64, tail uint32, leased bool) (Replacement, error) {
	err := fs.Rename(tmpPath, path)
	rep := Replacement{Old: src != nil}
	if !leased {
		return rep, err
	}
	rep.Alone = Unlease(src)
	if err != nil || !rep.Alone {
		return rep, err
	}
	if ok, ierr := Intact(src, size, tail); ierr != nil || !ok {
		// A rewritten file is kept aside by the caller, from src; one
		// that cannot be read now is held, and looked at again.
		return rep, nil
	}
	if rep.Tail, err = readPast(src, size); err != nil {
		// Held by the caller, and read again.
		return rep, nil
	}
	src.Close()
	rep.Closed = true
	return rep, nil
}

// readPast reads what f holds past off.
func readPast(f fsys.File, off int64) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil || fi.Size() <= off {
		return nil, err
	}
	data := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(data, off); err != nil && err != io.EOF {
		return nil, err
	}
	return data, nil
}
