package s3

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// Outcomes of one HTTP request the client sent (Config.OnAttempt).
const (
	AttemptOK          = "ok"           // an answer below 400
	AttemptClientError = "client_error" // 4xx but 429: not found, a precondition, a refused signature
	AttemptSlowDown    = "slow_down"    // 503 or 429: the server asks for less
	AttemptServerError = "server_error" // another 5xx
	AttemptError       = "error"        // no answer: the connection refused, reset or timed out
	AttemptCanceled    = "canceled"     // the caller gave up (a hedged read's loser, a deadline)
)

// AttemptResults lists every outcome, for metrics made in advance.
func AttemptResults() []string {
	return []string{AttemptOK, AttemptClientError, AttemptSlowDown, AttemptServerError, AttemptError, AttemptCanceled}
}

// countingTransport reports each request it carries, and its outcome: the
// client's retries are requests too, so a bucket that fails requests
// the client then retries shows here, where the calls themselves succeed.
type countingTransport struct {
	next http.RoundTripper
	on   func(method, result string)
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	// Go's transport itself sends a request again on another connection
	// when the one it took failed before answering (a pooled connection
	// the server or a proxy reset): each try takes a connection.
	var conns atomic.Int32
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{GetConn: func(string) { conns.Add(1) }})
	resp, err := t.next.RoundTrip(r.WithContext(ctx))
	for range conns.Load() - 1 {
		t.on(r.Method, AttemptError)
	}
	t.on(r.Method, attemptResult(r.Context(), resp, err))
	return resp, err
}

// attemptResult classes one request's outcome.
func attemptResult(ctx context.Context, resp *http.Response, err error) string {
	switch {
	case err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return AttemptCanceled
	case err != nil:
		return AttemptError
	case resp.StatusCode < 400:
		return AttemptOK
	case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests:
		return AttemptSlowDown
	case resp.StatusCode >= 500:
		return AttemptServerError
	}
	return AttemptClientError
}
