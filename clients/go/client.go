package squawk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

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
}

// New creates a client for the daemon at target (a gRPC target such as
// "127.0.0.1:50051" or "unix:///run/squawk.sock"). It does not wait for the
// daemon: the connection is made on first use and remade whenever it breaks.
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
	if cfg.propagator == nil {
		return nil, errors.New("squawk: propagator must not be nil")
	}
	if cfg.now == nil {
		return nil, errors.New("squawk: clock must not be nil")
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(reconnect),
		grpc.WithChainUnaryInterceptor(traceInterceptor(cfg.propagator)),
	}, cfg.dialOptions...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("squawk: dial %q: %w", target, err)
	}
	profile, warnings := profileFromEnv(os.LookupEnv)
	for _, w := range warnings {
		slog.Warn("squawk: " + w)
	}
	return &Client{conn: conn, rpc: squawkv1.NewPolicyServiceClient(conn), cfg: cfg, profile: profile}, nil
}

// Close releases the connection. Calls made after Close fail.
func (c *Client) Close() error {
	return c.conn.Close()
}

// PolicyService returns the generated stub on the client's connection, for
// the RPCs this package does not wrap (DecideRetryBatch, AnalyzeError,
// CheckDispatch). Its calls carry the trace context too, but have neither
// the call timeout nor the local fallback.
func (c *Client) PolicyService() squawkv1.PolicyServiceClient {
	return c.rpc
}

// FallbackCount is the number of decisions answered by the local fallback
// since the client was created (Run's local REASON_CANCELLED answers on an
// ended ctx included).
func (c *Client) FallbackCount() int64 {
	return c.fallbacks.Load()
}

// Classify asks the daemon what kind of failure this is and whether the
// profile would resend it. It has no local fallback: an unreachable daemon
// is an error.
func (c *Client) Classify(ctx context.Context, req *squawkv1.ClassifyRequest) (*squawkv1.ClassifyResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("squawk: Classify: %w", &InputError{Field: "request", Message: "must not be nil"})
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
// daemon is unreachable, answers UNAVAILABLE or DEADLINE_EXCEEDED, or takes
// longer than the call timeout, the local fallback answers instead (unless
// disabled) and the Decision has Fallback set. A request the policy cannot
// accept is an error with codes.InvalidArgument, from the daemon or from the
// fallback alike. When ctx itself ends before an answer, DecideRetry returns
// an error that matches ctx.Err() with errors.Is.
func (c *Client) DecideRetry(ctx context.Context, req *squawkv1.DecideRetryRequest) (Decision, error) {
	if req == nil {
		return Decision{}, fmt.Errorf("squawk: DecideRetry: %w", &InputError{Field: "request", Message: "must not be nil"})
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout)
	defer cancel()
	resp, err := c.rpc.DecideRetry(callCtx, req)
	if err == nil {
		return decisionFromProto(resp), nil
	}
	if !c.cfg.fallback || ctx.Err() != nil || !daemonDown(err) {
		return Decision{}, wrapCallError(ctx, "DecideRetry", err)
	}
	d, ferr := c.decideLocally(req, err)
	if ferr != nil {
		return Decision{}, fmt.Errorf("squawk: DecideRetry (local fallback, daemon: %v): %w", err, ferr)
	}
	return d, nil
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

// daemonDown reports whether err means the daemon could not answer in time,
// as opposed to answering with a refusal.
func daemonDown(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

func wrapCallError(ctx context.Context, method string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("squawk: %s: %w: %w", method, ctxErr, err)
	}
	return fmt.Errorf("squawk: %s: %w", method, err)
}

// Decision is the answer to one DecideRetry call.
type Decision struct {
	// Action is what to do next: ACTION_RETRY, ACTION_CORRECT or ACTION_FAIL.
	Action squawkv1.Action
	// Reason names the rule that decided.
	Reason squawkv1.Reason
	// Delay is how long to wait before resending; zero unless Action is RETRY.
	Delay time.Duration
	// Explanation is one human sentence saying why.
	Explanation string
	// ConsumesAttempt is false for corrections, which do not count against
	// max_attempts.
	ConsumesAttempt bool
	// Classification is the failure's classification under the same profile.
	Classification *squawkv1.ClassifyResponse
	// Fallback is true when the local fallback answered instead of the daemon.
	Fallback bool
	// FallbackCause is the daemon error that sent the call to the fallback
	// (nil when Fallback is false).
	FallbackCause error
}

// Proto returns the decision as the wire message.
func (d Decision) Proto() *squawkv1.DecideRetryResponse {
	return &squawkv1.DecideRetryResponse{
		Action:          d.Action,
		Delay:           durationpb.New(d.Delay),
		Reason:          d.Reason,
		Explanation:     d.Explanation,
		ConsumesAttempt: d.ConsumesAttempt,
		Classification:  d.Classification,
	}
}

// String is a short log-friendly form, e.g. "RETRY after 542ms (TRANSIENT_STATUS)".
func (d Decision) String() string {
	var b strings.Builder
	b.WriteString(strings.TrimPrefix(d.Action.String(), "ACTION_"))
	if d.Action == squawkv1.Action_ACTION_RETRY {
		fmt.Fprintf(&b, " after %v", d.Delay)
	}
	fmt.Fprintf(&b, " (%s)", strings.TrimPrefix(d.Reason.String(), "REASON_"))
	if d.Fallback {
		b.WriteString(" [local fallback]")
	}
	return b.String()
}

func decisionFromProto(r *squawkv1.DecideRetryResponse) Decision {
	return Decision{
		Action:          r.GetAction(),
		Reason:          r.GetReason(),
		Delay:           r.GetDelay().AsDuration(),
		Explanation:     r.GetExplanation(),
		ConsumesAttempt: r.GetConsumesAttempt(),
		Classification:  r.GetClassification(),
	}
}

// InputError is a request the policy cannot accept; Field names the
// offending request field (e.g. "attempt", "max_attempts"). The local
// fallback returns it; status.FromError reports it as codes.InvalidArgument,
// like the daemon's own refusal.
type InputError struct {
	Field   string
	Message string
}

func (e *InputError) Error() string {
	return e.Field + ": " + e.Message
}

// GRPCStatus makes status.FromError and status.Code see codes.InvalidArgument.
func (e *InputError) GRPCStatus() *status.Status {
	return status.New(codes.InvalidArgument, e.Error())
}
