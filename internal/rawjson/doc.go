// Package rawjson reads and edits JSON text as the bytes it was written in,
// the way the transcript packages need it: a single-pass validating scanner
// (strict for transcript entries, see CompactObject), spans of members and
// elements with in-place edits that leave every other byte alone, objects
// and values as JavaScript's JSON.parse sees them (Object), and
// JavaScript's string rules (JSON.stringify's encoding, Node.js's UTF-8
// decoding, trim and length). Text is never decoded into maps and
// re-encoded: Go would sort the keys, and transcript readers depend on key
// order.
package rawjson
