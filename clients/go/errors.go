package squawk

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// InputError is a request the policy cannot accept; Field names the
// offending request field (e.g. "attempt", "max_attempts",
// "requests[3].attempt", "original_request.rooms[3].beds"). The daemon's
// INVALID_ARGUMENT answers and the local fallback's refusals are both
// InputErrors, and status.FromError reports either as codes.InvalidArgument
// with a google.rpc.BadRequest detail naming the field.
type InputError struct {
	// Field is the request field at fault; empty only when a daemon refusal
	// named none.
	Field string
	// Message says what is wrong with it.
	Message string
	// status is the daemon's own answer, kept so that status.FromError
	// returns it with its details intact; nil for a local refusal.
	status *status.Status
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// GRPCStatus makes status.FromError and status.Code see codes.InvalidArgument.
func (e *InputError) GRPCStatus() *status.Status {
	if e.status != nil {
		return e.status
	}
	st := status.New(codes.InvalidArgument, e.Error())
	if e.Field == "" {
		return st
	}
	detailed, err := st.WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: e.Field, Description: e.Message}},
	})
	if err != nil {
		return st
	}
	return detailed
}

// inputErrorFrom reads the field of a daemon INVALID_ARGUMENT answer: from
// its google.rpc.BadRequest detail when the daemon sent one, else from the
// "field: description" form of its message, which every daemon uses.
func inputErrorFrom(st *status.Status) *InputError {
	for _, detail := range st.Details() {
		br, ok := detail.(*errdetails.BadRequest)
		if !ok || len(br.GetFieldViolations()) == 0 {
			continue
		}
		v := br.GetFieldViolations()[0]
		msg := v.GetDescription()
		if msg == "" {
			_, msg = splitField(st.Message())
		}
		return &InputError{Field: v.GetField(), Message: msg, status: st}
	}
	field, msg := splitField(st.Message())
	return &InputError{Field: field, Message: msg, status: st}
}

// splitField splits "field: description". A field path has no spaces, so
// a message such as "bad input: ..." is not read as naming a field.
func splitField(msg string) (field, rest string) {
	field, rest, ok := strings.Cut(msg, ": ")
	if !ok || field == "" || strings.ContainsAny(field, " \t\r\n") {
		return "", msg
	}
	return field, rest
}

// wrapCallError names the method, turns an INVALID_ARGUMENT answer into an
// *InputError, and makes an ended ctx visible to errors.Is.
func wrapCallError(ctx context.Context, method string, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
		err = inputErrorFrom(st)
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("squawk: %s: %w: %w", method, ctxErr, err)
	}
	return fmt.Errorf("squawk: %s: %w", method, err)
}

// nilRequest is the refusal of a nil request message.
func nilRequest(method string) error {
	return fmt.Errorf("squawk: %s: %w", method, &InputError{Field: "request", Message: "must not be nil"})
}
