package squawk

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

// Client-side throttling: when the daemon itself is overloaded, the client
// sends it fewer calls instead of more (docs/clients/README.md, pinned by
// tests/vectors/throttle.json). The rule is the Google SRE book's adaptive
// throttling ("Handling Overload") with K = 2, which is also Envoy's
// admission control filter at a 50 % success threshold: a call is refused
// locally with probability (requests - 2 x accepts) / (requests + 1), so
// nothing changes while the daemon answers at least half the calls, and past
// that it sees about twice what it answers however many callers ask. The
// counts cover Hystrix's rolling window (ten one-second buckets) and nothing
// is refused below Hystrix's request volume threshold of 20. Refusals are
// random rather than a hold-off for the daemon's grpc-retry-pushback-ms:
// callers that all wait out the same pushback come back together, in waves.
const (
	throttleWindowS     = 10  // seconds in the rolling window
	throttleMinRequests = 20  // below this many requests, every call is sent
	throttleK           = 2.0 // the SRE book's multiplier: accepts count twice
)

// throttleBucket holds the calls of one whole second of the clock.
type throttleBucket struct {
	second            int64
	requests, accepts int
}

// throttleWindow is one method's ring of buckets, indexed by second mod
// throttleWindowS; a bucket whose second is out of the window reads as
// empty and is reset when its slot is reused.
type throttleWindow [throttleWindowS]throttleBucket

func (w *throttleWindow) totals(second int64) (requests, accepts int) {
	for _, b := range w {
		if second-throttleWindowS < b.second && b.second <= second {
			requests += b.requests
			accepts += b.accepts
		}
	}
	return requests, accepts
}

func (w *throttleWindow) bucket(second int64) *throttleBucket {
	b := &w[((second%throttleWindowS)+throttleWindowS)%throttleWindowS]
	if b.second != second {
		*b = throttleBucket{second: second}
	}
	return b
}

// throttle is the rule as a state machine: no I/O, the clock (ms) and the
// random draw given by the caller. It keeps a window per known method only
// (fixed at creation, so its memory is bounded); a method it does not know
// is always sent and not counted. Safe for concurrent use.
type throttle struct {
	mu      sync.Mutex
	windows map[string]*throttleWindow
}

func newThrottle(methods ...string) *throttle {
	t := &throttle{windows: make(map[string]*throttleWindow, len(methods))}
	for _, m := range methods {
		t.windows[m] = new(throttleWindow) // a bucket never used counts nothing
	}
	return t
}

// allow reports whether to send a call to method asked at nowMs, given a
// draw uniform in [0, 1), with the window's requests and accepts before
// the call. A call refused here counts as a request at once.
func (t *throttle) allow(method string, nowMs int64, draw float64) (ok bool, requests, accepts int) {
	second := floorDiv(nowMs, 1000)
	t.mu.Lock()
	w := t.windows[method]
	if w == nil {
		t.mu.Unlock()
		return true, 0, 0
	}
	defer t.mu.Unlock()
	requests, accepts = w.totals(second)
	p := 0.0
	if requests >= throttleMinRequests {
		p = max(0, (float64(requests)-throttleK*float64(accepts))/float64(requests+1))
	}
	ok = draw >= p
	if !ok {
		w.bucket(second).requests++
	}
	return ok, requests, accepts
}

// ended records that a sent call to method ended at nowMs with code: a
// request only now (a call in flight is no evidence either way, so a burst
// at start does not read as a daemon that answers none of it), and an
// accept unless the daemon had no room for it (RESOURCE_EXHAUSTED) or no
// answer in time (DEADLINE_EXCEEDED).
func (t *throttle) ended(method string, nowMs int64, code codes.Code) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.windows[method]
	if w == nil {
		return
	}
	b := w.bucket(floorDiv(nowMs, 1000))
	b.requests++
	if code != codes.ResourceExhausted && code != codes.DeadlineExceeded {
		b.accepts++
	}
}

// floorDiv is a / b rounded down, so that a clock before 0 still has
// whole seconds.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// throttlePrefix starts the full name of every method the throttle counts.
var throttlePrefix = "/" + squawkv1.PolicyService_ServiceDesc.ServiceName + "/"

// newServiceThrottle is a throttle with a window for each unary method of
// the PolicyService.
func newServiceThrottle() *throttle {
	var methods []string
	for _, m := range squawkv1.PolicyService_ServiceDesc.Methods {
		methods = append(methods, m.MethodName)
	}
	return newThrottle(methods...)
}

// throttleInterceptor passes every unary call through t, on the monotonic
// clock and math/rand/v2. A call it refuses ends at once, unsent, with the
// RESOURCE_EXHAUSTED an overloaded daemon answers, so the client's one
// table of "not decided" statuses applies to it (the fallback decides,
// Admit and ReportOutcome fail open, the other calls return the error). A
// call ended by its caller (ctx cancelled, or ended before the call) is not
// counted: it says nothing of the daemon's load.
func throttleInterceptor(t *throttle) grpc.UnaryClientInterceptor {
	epoch := time.Now()
	now := func() int64 { return time.Since(epoch).Milliseconds() }
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		name, ok := strings.CutPrefix(method, throttlePrefix)
		if !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		callerDone := ctx.Err() != nil
		sent, requests, accepts := t.allow(name, now(), rand.Float64())
		if !sent {
			return status.Errorf(codes.ResourceExhausted,
				"squawk: not sent: the daemon answered %d of the last %d %s calls in time (%d s; client-side throttling)",
				accepts, requests, name, throttleWindowS)
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil && (callerDone || errors.Is(ctx.Err(), context.Canceled)) {
			return err
		}
		t.ended(name, now(), status.Code(err))
		return err
	}
}

// ThrottleInterceptor is the client's throttle (see "Client-side
// throttling" in the package documentation) for a connection to the daemon
// dialed by hand, e.g. grpc.WithChainUnaryInterceptor(squawk.ThrottleInterceptor()).
// Each call makes a throttle of its own; a Client has one already.
func ThrottleInterceptor() grpc.UnaryClientInterceptor {
	return throttleInterceptor(newServiceThrottle())
}
