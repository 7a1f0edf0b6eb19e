// Package squawk is the Go client of the Squawk retry-and-recovery policy
// daemon.
//
// An executor asks the daemon what to do after a failed tool call: resend the
// same payload after a delay (RETRY), ask for corrected parameters (CORRECT),
// or end the step (FAIL). The wire contract is package squawk.v1, generated
// into the squawkv1 sub-package.
//
// # Client
//
// New starts connecting at once, so the first call does not pay for the
// connection, and never blocks. Client wraps every PolicyService call:
// Classify, DecideRetry, DecideRetryBatch, AnalyzeError, CheckDispatch,
// Admit, ReportOutcome, GetUpstreams, GetEvents and ExplainDecision, each
// taking ctx first. All but AnalyzeError, which may wait on a model, and
// GetUpstreams, GetEvents and ExplainDecision, listings off the dispatch
// path, are bounded by the call timeout (WithCallTimeout, 50 ms by default; see DefaultCallTimeout).
// Every call carries the W3C trace context of its ctx in the outgoing gRPC
// metadata (traceparent, tracestate, baggage).
//
// # Transport security
//
// The default transport is plaintext, for a daemon on loopback or a unix
// socket. A daemon serving TLS (squawk serve --tls-cert, --tls-key, and
// --tls-client-ca for mutual TLS) takes grpc-go's transport credentials
// through WithDialOptions; a client certificate is needed only with
// --tls-client-ca:
//
//	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}})
//	c, err := squawk.New("squawk.internal:50051", squawk.WithDialOptions(grpc.WithTransportCredentials(creds)))
//
// A handshake the daemon refuses looks like an unreachable daemon, so the
// local fallback below answers for it unless disabled.
//
// # Upstream state
//
// The daemon keeps one state per (profile, upstream) for the whole pod: a
// circuit breaker, a retry budget, the cool-down after an upstream's
// Retry-After and its pace. Admit asks whether and when a dispatch may go
// (an Admission, whose Wait is the pace's start);
// ReportOutcome tells the pod how dispatches ended; GetUpstreams lists the
// state of every tracked upstream, reading the daemon's pages of 1,000 one
// after another (GetUpstreamsPage reads one). GetEvents reads one page of
// the pod's event history: what changed in those states and why (breaker
// transitions, pace changes, cool-downs begun, each with its cause),
// oldest first. A reader keeps the answer's next_after (NextAfter) and
// passes it as the next request's after to go on, from 0 for the oldest
// event the pod still holds; lost counts the events past after that the
// daemon no longer holds (it keeps the latest 4,096), so a reader that
// fell behind is told so rather than shown a gap. ExplainDecision says
// why one step was refused: an Admission refused, or a Decision that
// answered FAIL on a named upstream, carries the daemon's DecisionID (empty
// when the daemon kept none: an allowed call, the local fallback), and so
// does a *RunError's Decision when the pod refused the dispatch or the
// daemon failed the step; ExplainDecision(ctx, id) answers that decision,
// the upstream's breaker and pace when it was made, and the upstream's
// events before it (the daemon keeps the latest 4,096 refusals; an id it
// no longer keeps, or from a restarted daemon, is codes.NotFound). The
// command `squawk explain ID` shows the same. A DecideRetry naming its
// upstream records the failure too, and may answer more cautiously because
// of it.
//
// # Local fallback
//
// When the daemon does not decide (it is unreachable, slower than the call
// timeout, or the call ends with a status that says no decision was made:
// CANCELLED that is not ctx's, RESOURCE_EXHAUSTED, INTERNAL, UNKNOWN,
// UNIMPLEMENTED, ABORTED, DATA_LOSS), DecideRetry (and DecideRetryBatch, item
// by item) answers from the local fallback instead: the small contract
// written in docs/fallback.md (the built-in "default" profile's status
// sets, backoff and wait hints; no free-text classification, no redacted
// message, corrections disabled
// (a non-transient 4xx fails with REASON_NO_CORRECTION_AVAILABLE, or
// REASON_HITL_PROTECTED for human-approved inputs)). Such a Decision has
// Fallback set, and Client.FallbackCount counts them. The daemon is tried
// again on every call, so decisions come from it again as soon as it is back.
// Like the daemon, the fallback applies the pod's SQUAWK_STEP_RETRY_INITIAL_DELAY,
// _MAX_DELAY and _MAX_ATTEMPTS (or TRUVAG3_STEP_RETRY_*) overrides, read once
// in New. It knows neither the daemon's policy file nor its other profiles:
// whatever the request's profile and capability, it routes by "default".
// Admit and ReportOutcome fail open under the same condition: the dispatch
// is admitted (REASON_ADMITTED, breaker CLOSED, Admission.Fallback set) and
// the report records nothing (0), each counted in FallbackCount, so that a
// missing sidecar never stops an executor. WithFallbackDisabled turns all
// of this off; the calls then return the daemon's error. Classify,
// AnalyzeError, CheckDispatch, GetUpstreams, GetEvents and ExplainDecision
// have no fallback: an unreachable daemon is an error.
//
// # Client-side throttling
//
// An overloaded daemon gets fewer calls, not more. Per method, over the last
// ten seconds, once 20 calls have ended or been refused, the client
// refuses a call itself with probability (requests - 2 x accepts) /
// (requests + 1), where accepts are the calls the daemon answered other
// than RESOURCE_EXHAUSTED or DEADLINE_EXCEEDED. A call refused so is never sent and ends at once
// as the daemon's RESOURCE_EXHAUSTED would (the fallback decides, Admit and
// ReportOutcome fail open, the other calls return the error; the raw
// PolicyService stub is throttled too), with a message that starts
// "squawk: not sent:". Nothing is refused while the daemon answers at
// least half the calls (docs/clients/README.md).
//
// # Errors
//
// Errors are wrapped with %w. A daemon error keeps its gRPC status
// (status.FromError and status.Code see through the wrapping). A request
// the policy refuses, by the daemon's INVALID_ARGUMENT or the local
// fallback alike, is an *InputError whose Field names the offending field:
// read from the google.rpc.BadRequest detail the daemon sends, else from
// its "field: description" message. The step runner's failures are
// *RunError values carrying the last Decision.
//
// # Step runner
//
// Run calls a step function until it succeeds or the policy ends it, waiting
// the decided delays (honouring ctx, whose deadline is the step's) and
// calling an optional correction hook on CORRECT; an optional OnError hook
// may end the step or force a resend. A step reports an HTTP failure by
// returning a *StepError; any other error counts as a transport failure.
// The budgets in RunOptions are pointers (set them with new(n)), so that a
// budget of 0 is expressible and reaches the daemon as such. With
// RunOptions.Upstream set, Run asks Admit before every dispatch (sending
// ctx's deadline and RunOptions.Cost), sleeps a paced Wait, ends the step
// at once on REASON_UPSTREAM_SATURATED or a Wait past the deadline, waits
// out any other refusal (which consumes no attempt) unless it outlasts
// ctx's deadline or follows as many refusals in a row as the attempt
// budget, and reports each success with ReportOutcome, in batches flushed
// by Close (see WithOutcomeDelay). A result that implements Coster
// (Cost() float64) is reported with its real cost, and one that implements
// RateLimitHeaderer (RateLimitHeaders() map[string]string) with its
// rate-limit headers, which the pod's pacer reads. A busy executor asks for several
// permits at once and starts its next dispatches on the spares.
//
// # An LLM SDK behind Squawk
//
// NewRoundTripper returns an http.RoundTripper that makes each request a
// step of Run for one upstream: give it to an SDK that takes an
// *http.Client (openai-go's option.WithHTTPClient), with the SDK's own
// retries off (option.WithMaxRetries(0)). A response of 400 or more is a
// failed attempt for DecideRetry, resent on RETRY; each success is reported
// with its rate-limit headers and its JSON body's token usage; the SDK
// gets the last response, the transport's error, or, for a dispatch the pod
// refused before any call, a 503 of Squawk's own (x-squawk-reason,
// x-should-retry: false). See RoundTripper and docs/sdks.md.
package squawk
