// Package listing computes the listing metadata of a session (title, first
// prompt, branch, cwd, tag...) from its transcript exactly as the SDK's
// listSessions and getSessionInfo read it (Summary), together with the
// listing rules that look outside the transcript (Archived, the
// custom-title.json sidecar). The goldens recorded from the SDK, and the
// script that records them for this package and fork, are under testdata/.
package listing
