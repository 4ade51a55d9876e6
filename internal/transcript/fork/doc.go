// Package fork branches a session as the TypeScript SDK's forkSession does
// (Session): a first pass indexes what is kept of each entry, the chain a
// resume would load decides where a fork up to a uuid ends, and a second
// pass rewrites the copied entries. The goldens recorded from the SDK are
// under testdata/.
package fork
