package squawk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// reconnect keeps the channel from sitting in a long backoff while the daemon
// restarts: grpc-go's default backoff grows to 120 s, so a daemon that comes
// back would stay unused for minutes. The daemon is a local sidecar, so
// retrying the connection every second at most costs nothing.
var reconnect = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   time.Second,
	},
	MinConnectTimeout: 2 * time.Second,
}

// Client talks to one Squawk daemon. It is safe for concurrent use; create
// one per process and Close it when done.
type Client struct {
	conn      *grpc.ClientConn
	rpc       squawkv1.PolicyServiceClient
	cfg       config
	profile   localProfile
	fallbacks atomic.Int64
	outcomes  outcomeQueue
	leases    leaseTable
	throttle  *throttle // every unary call to the daemon passes through it
}

// addressVariable names the daemon's address when New is given no target
// (the pod's manifest sets it, as OTel SDKs read OTEL_EXPORTER_OTLP_ENDPOINT);
// defaultTarget is the daemon's own default listen address, used when the
// variable is unset or empty.
const (
	addressVariable = "SQUAWK_ADDRESS"
	defaultTarget   = "127.0.0.1:50051"
)

// New creates a client for the daemon at target (a gRPC target such as
// "127.0.0.1:50051" or "unix:///run/squawk.sock"); an empty target reads
// SQUAWK_ADDRESS, else dials 127.0.0.1:50051. It starts connecting at
// once but does not wait for the daemon, so the first call does not pay for
// the connection inside its call timeout; a daemon that is down is no error
// here, and the connection is remade whenever it breaks.
// The default transport is insecure (a local sidecar); pass transport
// credentials with WithDialOptions to change it.
func New(target string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.callTimeout <= 0 {
		return nil, fmt.Errorf("squawk: call timeout must be > 0, got %v", cfg.callTimeout)
	}
	if cfg.outcomeDelay < 0 || cfg.outcomeDelay > maxOutcomeDelay {
		return nil, fmt.Errorf("squawk: outcome delay must be from 0 to %v, got %v", maxOutcomeDelay, cfg.outcomeDelay)
	}
	if cfg.propagator == nil {
		return nil, errors.New("squawk: propagator must not be nil")
	}
	if cfg.now == nil {
		return nil, errors.New("squawk: clock must not be nil")
	}
	th := newServiceThrottle()
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(reconnect),
		// The throttle first: a call it refuses never leaves, so it reaches
		// neither the trace interceptor nor those chained by WithDialOptions.
		grpc.WithChainUnaryInterceptor(throttleInterceptor(th), traceInterceptor(cfg.propagator)),
	}, cfg.dialOptions...)
	if target == "" {
		target = os.Getenv(addressVariable)
	}
	if target == "" {
		target = defaultTarget
	}
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("squawk: dial %q: %w", target, err)
	}
	// NewClient stays idle until the first call, which would then spend most
	// of its 50 ms on the handshake and fall back.
	conn.Connect()
	profile, warnings := profileFromEnv(os.LookupEnv)
	for _, w := range warnings {
		slog.Warn("squawk: " + w)
	}
	return &Client{conn: conn, rpc: squawkv1.NewPolicyServiceClient(conn), cfg: cfg, profile: profile, throttle: th}, nil
}

// Close sends the success reports Run still holds (see WithOutcomeDelay),
// then releases the connection. Calls made after Close fail.
func (c *Client) Close() error {
	c.flushOnClose()
	return c.conn.Close()
}

// PolicyService returns the generated stub on the client's connection, for
// callers that want the raw wire answers. Its calls carry the trace context
// too, but have neither the call timeout, the local fallback nor the
// *InputError mapping.
func (c *Client) PolicyService() squawkv1.PolicyServiceClient {
	return c.rpc
}

// FallbackCount is the number of answers the client gave without the
// daemon since it was created: decisions from the local fallback (each
// item of a batch counts, and so do Run's local REASON_CANCELLED answers on
// an ended ctx), and Admit and ReportOutcome calls that failed open.
func (c *Client) FallbackCount() int64 {
	return c.fallbacks.Load()
}

// Classify asks the daemon what kind of failure this is and whether the
// profile would resend it. It has no local fallback: an unreachable daemon
// is an error.
func (c *Client) Classify(ctx context.Context, req *squawkv1.ClassifyRequest) (*squawkv1.ClassifyResponse, error) {
	if req == nil {
		return nil, nilRequest("Classify")
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout)
	defer cancel()
	resp, err := c.rpc.Classify(callCtx, req)
	if err != nil {
		return nil, wrapCallError(ctx, "Classify", err)
	}
	return resp, nil
}

// DecideRetry asks the daemon what to do after a failed attempt. When the
// daemon does not decide (it is unreachable, takes longer than the call
// timeout, or the call ends with a status that says no decision was made,
// CANCELLED or INTERNAL among them: see fallbackCodes), the local fallback
// answers instead (unless disabled) and the Decision has Fallback set. A request the policy cannot
// accept is an *InputError, from the daemon or from the fallback alike.
// When ctx itself ends before an answer, DecideRetry returns an error that
// matches ctx.Err() with errors.Is.
func (c *Client) DecideRetry(ctx context.Context, req *squawkv1.DecideRetryRequest) (Decision, error) {
	if req == nil {
		return Decision{}, nilRequest("DecideRetry")
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout)
	defer cancel()
	resp, err := c.rpc.DecideRetry(callCtx, req)
	if err == nil {
		return decisionFromProto(resp), nil
	}
	if !c.fallsBack(ctx, err) {
		return Decision{}, wrapCallError(ctx, "DecideRetry", err)
	}
	d, ferr := c.decideLocally(req, err)
	if ferr != nil {
		return Decision{}, fmt.Errorf("squawk: DecideRetry (local fallback, daemon: %v): %w", err, ferr)
	}
	return d, nil
}

// AnalyzeError asks the daemon for corrected parameters after a CORRECT
// decision. Only ctx bounds it, not the call timeout: with a model
// configured, an analysis legitimately takes seconds (the daemon bounds it
// by its own analyzer deadline). It has no local fallback.
func (c *Client) AnalyzeError(ctx context.Context, req *squawkv1.AnalyzeErrorRequest) (*squawkv1.AnalyzeErrorResponse, error) {
	if req == nil {
		return nil, nilRequest("AnalyzeError")
	}
	resp, err := c.rpc.AnalyzeError(ctx, req)
	if err != nil {
		return nil, wrapCallError(ctx, "AnalyzeError", err)
	}
	return resp, nil
}

// CheckDispatch asks the daemon whether parameters may be dispatched (the
// pre-dispatch guard). It is bounded by the call timeout and has no local
// fallback: an unreachable daemon is an error, never a silent "ok".
func (c *Client) CheckDispatch(ctx context.Context, req *squawkv1.CheckDispatchRequest) (*squawkv1.CheckDispatchResponse, error) {
	if req == nil {
		return nil, nilRequest("CheckDispatch")
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout)
	defer cancel()
	resp, err := c.rpc.CheckDispatch(callCtx, req)
	if err != nil {
		return nil, wrapCallError(ctx, "CheckDispatch", err)
	}
	return resp, nil
}

// fallbackCodes are the statuses that say the daemon did not decide. The
// daemon itself answers INVALID_ARGUMENT, INTERNAL and RESOURCE_EXHAUSTED (a
// call that reached it too close to its deadline); the others come from
// gRPC or a proxy: unreachable or too slow, CANCELLED by the server or
// a proxy (under load, or on shutdown; the caller's own cancellation is an
// ended ctx, which never falls back), RESOURCE_EXHAUSTED (overload, an
// answer over the size limit), UNKNOWN (an answer that could not be read),
// UNIMPLEMENTED (an older daemon, or another server at the address),
// ABORTED and DATA_LOSS. Left out, so that they surface: INVALID_ARGUMENT
// (the caller's bad input), NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION,
// OUT_OF_RANGE (verdicts on the request), PERMISSION_DENIED and
// UNAUTHENTICATED (a verdict on the caller, which a fallback would hide for
// good). The Python and TypeScript clients keep the same table, pinned by
// the runner vectors.
var fallbackCodes = map[codes.Code]bool{
	codes.Canceled:          true,
	codes.Unknown:           true,
	codes.DeadlineExceeded:  true,
	codes.ResourceExhausted: true,
	codes.Aborted:           true,
	codes.Internal:          true,
	codes.Unavailable:       true,
	codes.Unimplemented:     true,
	codes.DataLoss:          true,
}

// fallsBack reports whether a failed call is answered locally (decisions)
// or fails open (Admit, ReportOutcome): the fallback is on, the caller
// still waits (its ctx has not ended), and the daemon did not decide (as
// opposed to answering with a refusal).
func (c *Client) fallsBack(ctx context.Context, err error) bool {
	if !c.cfg.fallback || ctx.Err() != nil {
		return false
	}
	return fallbackCodes[status.Code(err)]
}

// decideLocally answers req from the local "default" profile and counts it.
func (c *Client) decideLocally(req *squawkv1.DecideRetryRequest, cause error) (Decision, error) {
	d, err := decideLocal(req, c.profile, c.cfg.now())
	if err != nil {
		return Decision{}, err
	}
	d.Fallback = true
	d.FallbackCause = cause
	c.fallbacks.Add(1)
	return d, nil
}
