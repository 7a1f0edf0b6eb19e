package squawk

import (
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
)

// DefaultCallTimeout bounds each Classify, DecideRetry, CheckDispatch,
// Admit and ReportOutcome call (and DecideRetryBatch once per started 100
// items) when WithCallTimeout is not given. AnalyzeError, GetUpstreams and
// GetEvents are bounded by their ctx only.
const DefaultCallTimeout = 50 * time.Millisecond

// Option configures a Client in New.
type Option func(*config)

type config struct {
	callTimeout  time.Duration
	dialOptions  []grpc.DialOption
	fallback     bool
	propagator   propagation.TextMapPropagator
	now          func() time.Time
	outcomeDelay time.Duration
}

func defaultConfig() config {
	return config{
		callTimeout:  DefaultCallTimeout,
		fallback:     true,
		propagator:   propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		now:          time.Now,
		outcomeDelay: DefaultOutcomeDelay,
	}
}

// WithCallTimeout bounds the calls to the daemon (default 50 ms; see
// DefaultCallTimeout for which). A decision slower than this is answered by
// the local fallback, unless it is disabled; the other calls fail with
// DEADLINE_EXCEEDED. The ctx given to the call can only shorten it. d must
// be > 0.
func WithCallTimeout(d time.Duration) Option {
	return func(c *config) { c.callTimeout = d }
}

// WithDialOptions adds gRPC dial options. They are applied after the
// client's own (insecure transport credentials, a short reconnect backoff and
// the trace-context interceptor), so they can override the credentials or
// the connect parameters; interceptors given here are chained after the
// client's.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOptions = append(c.dialOptions, opts...) }
}

// WithFallbackDisabled makes DecideRetry and DecideRetryBatch return the
// daemon's error instead of answering from the local "default" profile when
// the daemon is unreachable or too slow, and Admit and ReportOutcome return
// it instead of failing open.
func WithFallbackDisabled() Option {
	return func(c *config) { c.fallback = false }
}

// WithPropagator sets how the trace context of a call's ctx is written into
// its outgoing metadata. The default writes W3C traceparent/tracestate and
// baggage whatever the global propagator is; pass otel.GetTextMapPropagator()
// to use the global one instead.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

// WithClock sets the clock the local fallback reads to turn an HTTP-date
// Retry-After or a spent quota's absolute reset (an epoch or RFC 3339 time)
// into a wait, and Run reads to time its spare permits' leases.
// The default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.now = now }
}

// maxOutcomeDelay bounds WithOutcomeDelay: a report held longer than this
// would reach the pod's breaker and pace too late to matter.
const maxOutcomeDelay = time.Second

// WithOutcomeDelay sets how long Run holds a success report (of a step with
// an Upstream) to send it with others in one ReportOutcome: at most d
// after the first one held, at once when 100 are held, and on Close, so
// close the client before the process exits. A success started on a lease
// of paced starts (Admission.Spacing above zero) may be held 200 ms, or d
// when longer, unless a report held with it is due sooner. The success of
// a call that holds a slot of a declared cap (Admission.HoldsSlot) is not
// held: it goes at once, with whatever is held with it. Default 50 ms
// (DefaultOutcomeDelay); 0 sends each report when its step succeeds. d must
// be from 0 to 1 s. A batch that fails open counts one fallback.
func WithOutcomeDelay(d time.Duration) Option {
	return func(c *config) { c.outcomeDelay = d }
}
