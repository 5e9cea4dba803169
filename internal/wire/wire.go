// Package wire carries fencelock's errors across the network: the server
// turns a sentinel into a Connect error with a stable code and an
// ErrorDetail, and the client turns it back, so errors.Is works end to end.
package wire

import (
	"context"
	"errors"
	"net"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fencelock/fencelock"
	fencelockv1 "github.com/fencelock/fencelock/proto/fencelock/v1"
)

// MaxRequestBytes bounds one request message; every field has a smaller
// limit.
const MaxRequestBytes = 64 << 10

// MaxSessionCalls bounds the calls one Session stream has out at once: a
// node refuses calls past it (counting an answer until it goes to be
// sent), and ends a stream with twice as many; the Go client keeps no more
// than it out.
const MaxSessionCalls = 4096

// connectCodes maps each wire code to the Connect code it travels with.
var connectCodes = map[string]connect.Code{
	fencelock.CodeLockHeld:           connect.CodeAlreadyExists,
	fencelock.CodeNotHolder:          connect.CodeFailedPrecondition,
	fencelock.CodeLeaseExpired:       connect.CodeFailedPrecondition,
	fencelock.CodeStaleToken:         connect.CodeFailedPrecondition,
	fencelock.CodeMissingToken:       connect.CodeInvalidArgument,
	fencelock.CodeInvalidToken:       connect.CodeInvalidArgument,
	fencelock.CodeInvalidName:        connect.CodeInvalidArgument,
	fencelock.CodeInvalidTTL:         connect.CodeInvalidArgument,
	fencelock.CodeInvalidArgument:    connect.CodeInvalidArgument,
	fencelock.CodeNotFound:           connect.CodeNotFound,
	fencelock.CodeTooLarge:           connect.CodeResourceExhausted,
	fencelock.CodeNotLeader:          connect.CodeUnavailable,
	fencelock.CodeUnavailable:        connect.CodeUnavailable,
	fencelock.CodePreconditionFailed: connect.CodeFailedPrecondition,
	fencelock.CodeUnauthenticated:    connect.CodeUnauthenticated,
	fencelock.CodeTokensExhausted:    connect.CodeResourceExhausted,
	fencelock.CodeInvalidSequencer:   connect.CodePermissionDenied,
	fencelock.CodePermissionDenied:   connect.CodePermissionDenied,
	fencelock.CodeResourceExhausted:  connect.CodeResourceExhausted,
}

// ToConnect converts an error from the service into a Connect error that
// carries its fencelock code. Context errors become Canceled or
// DeadlineExceeded; an error wrapping no sentinel becomes Internal.
func ToConnect(err error) error {
	if err == nil {
		return nil
	}
	code := fencelock.Code(err)
	if code == "" {
		switch {
		case errors.Is(err, context.Canceled):
			return connect.NewError(connect.CodeCanceled, err)
		case errors.Is(err, context.DeadlineExceeded):
			return connect.NewError(connect.CodeDeadlineExceeded, err)
		}
		return connect.NewError(connect.CodeInternal, err)
	}
	ce := connect.NewError(connectCodes[code], err)
	if det, derr := connect.NewErrorDetail(detailOf(code, err)); derr == nil {
		ce.AddDetail(det)
	}
	return ce
}

// detailOf describes err, whose fencelock code is code, for the wire.
func detailOf(code string, err error) *fencelockv1.ErrorDetail {
	d := &fencelockv1.ErrorDetail{Code: code}
	var held *fencelock.LockHeldError
	if errors.As(err, &held) {
		d.Name, d.Holder, d.Token = string(held.Name), held.Holder, uint64(held.Token)
		if !held.Expires.IsZero() {
			d.Expires = timestamppb.New(held.Expires)
		}
	}
	var stale *fencelock.StaleTokenError
	if errors.As(err, &stale) {
		d.Name, d.Token = stale.Domain, uint64(stale.Highest)
	}
	var nl *fencelock.NotLeaderError
	if errors.As(err, &nl) {
		d.Leader = nl.LeaderAPI
	}
	return d
}

// fromDetail turns a wire error detail back into an error, or nil if its
// code is unknown.
func fromDetail(msg string, d *fencelockv1.ErrorDetail) error {
	sentinel := fencelock.ErrorForCode(d.GetCode())
	if sentinel == nil {
		return nil
	}
	switch sentinel {
	case fencelock.ErrLockHeld:
		e := &fencelock.LockHeldError{Name: fencelock.LockName(d.Name), Holder: d.Holder, Token: fencelock.Token(d.Token)}
		if d.Expires != nil {
			e.Expires = d.Expires.AsTime()
		}
		return e
	case fencelock.ErrNotLeader:
		return fencelock.NewNotLeaderError(msg, d.Leader)
	}
	return &remoteError{msg: msg, sentinel: sentinel}
}

// ToStatus is ToConnect for one call of a Session stream.
func ToStatus(err error) *fencelockv1.Status {
	var ce *connect.Error
	errors.As(ToConnect(err), &ce)
	st := &fencelockv1.Status{Code: ce.Code().String(), Message: err.Error()}
	if code := fencelock.Code(err); code != "" {
		st.Detail = detailOf(code, err)
	}
	return st
}

// FromStatus is FromConnect for one call of a Session stream.
func FromStatus(st *fencelockv1.Status) error {
	if st.GetDetail() != nil {
		if err := fromDetail(st.GetMessage(), st.Detail); err != nil {
			return err
		}
	}
	var code connect.Code
	if err := code.UnmarshalText([]byte(st.GetCode())); err != nil {
		code = connect.CodeUnknown
	}
	return FromConnect(connect.NewError(code, errors.New(st.GetMessage())))
}

// FromConnect converts an error returned by a Connect call back into an
// error wrapping the fencelock sentinel it was made from. Network errors and
// errors without a fencelock code whose Connect code is Unavailable wrap
// ErrUnavailable; others are returned as they are.
func FromConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	for _, det := range ce.Details() {
		v, verr := det.Value()
		if verr != nil {
			continue
		}
		d, ok := v.(*fencelockv1.ErrorDetail)
		if !ok {
			continue
		}
		if err := fromDetail(ce.Message(), d); err != nil {
			return err
		}
		break
	}
	switch ce.Code() {
	case connect.CodeUnavailable:
		return &remoteError{msg: ce.Message(), sentinel: fencelock.ErrUnavailable}
	case connect.CodeDeadlineExceeded:
		return &remoteError{msg: ce.Message(), sentinel: context.DeadlineExceeded}
	case connect.CodeCanceled:
		return &remoteError{msg: ce.Message(), sentinel: context.Canceled}
	}
	return err
}

// ErrNoAnswer: the node did not answer (network error, broken connection).
var ErrNoAnswer = errors.New("no answer")

// FromCall converts the error of a client's call into fencelock's errors
// (FromConnect), and one the node never answered (a broken connection, a
// dial that failed: not a node's own error, which carries a detail) into
// one wrapping ErrNoAnswer and fencelock.ErrUnavailable.
func FromCall(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) && len(ce.Details()) == 0 && isTransportFailure(ce) {
		return NoAnswer(FromConnect(err))
	}
	if !errors.As(err, &ce) && isNetErr(err) {
		return NoAnswer(err)
	}
	return FromConnect(err)
}

// isTransportFailure reports whether ce was made by the client's side of
// the connection, not sent by a node.
func isTransportFailure(ce *connect.Error) bool {
	return ce.Code() == connect.CodeUnavailable || ce.Code() == connect.CodeUnknown && isNetErr(ce)
}

func isNetErr(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe)
}

// NoAnswer returns err as an error of a node that did not answer: it wraps
// err, ErrNoAnswer and fencelock.ErrUnavailable.
func NoAnswer(err error) error { return &noAnswerError{err: err} }

// noAnswerError wraps ErrNoAnswer and fencelock.ErrUnavailable.
type noAnswerError struct{ err error }

func (e *noAnswerError) Error() string { return "no answer: " + e.err.Error() }
func (e *noAnswerError) Unwrap() []error {
	return []error{ErrNoAnswer, fencelock.ErrUnavailable, e.err}
}

// remoteError is an error that crossed the wire: the server's message, and
// the sentinel its code names.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// WithAdminToken sets token, if any, as the bearer token of req (the admin
// token of membership changes).
func WithAdminToken[T any](req *connect.Request[T], token string) *connect.Request[T] {
	if token != "" {
		req.Header().Set("Authorization", "Bearer "+token)
	}
	return req
}
