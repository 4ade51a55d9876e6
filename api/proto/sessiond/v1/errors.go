package sessiondv1

// Error details are part of the wire contract: sessiond attaches a
// google.rpc.ErrorInfo with this domain to the errors that need one, and
// clients in any language match on the domain and reason.
const (
	// ErrorDomain is the ErrorInfo domain of sessiond's error details.
	ErrorDomain = "sessiond"
	// ReasonNotProcessed is the ErrorInfo reason on an UNAVAILABLE answer
	// given before a request was looked at (the daemon is draining). A
	// client may retry such a request even when its entries carry no uuid.
	ReasonNotProcessed = "NOT_PROCESSED"
)

// ReasonSummaryConflict is the ErrorInfo reason on the ABORTED answer to an
// Append whose summary was folded from a version the session no longer
// has: nothing was stored; fold onto the current summary and send again.
const ReasonSummaryConflict = "SUMMARY_CONFLICT"

// ReasonSessiond is the ErrorInfo reason on every other error sessiond
// answers with: the message is sessiond's own, to be shown as it is. A
// status without an ErrorInfo of this domain was made by gRPC on the way
// (no daemon, a deadline, a cancel), and a client says what happened in
// its own words.
const ReasonSessiond = "SESSIOND"
