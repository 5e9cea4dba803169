package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/acl"
	"github.com/fencelock/fencelock/fence"
	"github.com/fencelock/fencelock/httpfence"
)

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	ans := errorAnswer(err)
	if ans.Status >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	ans.write(w)
}

// parseWrite reads and validates the headers every write shares, and checks
// that the caller may make the write (authorizeWrite).
func (s *Server) parseWrite(r *http.Request, op opKind, key, domain string) (write, error) {
	wr := write{op: op, key: key, domain: domain}
	if op != opCheck {
		if err := ValidateKey(key); err != nil {
			return wr, err
		}
		d, ok, err := httpfence.ParseDomain(r.Header)
		if err != nil {
			return wr, err
		}
		wr.domain = key
		if ok {
			wr.domain = d
		}
	}
	if err := ValidateDomain(wr.domain); err != nil {
		if op != opCheck && wr.domain == key {
			return wr, fmt.Errorf("object key %q cannot be its own fence domain (%w); send a %s header", key, err, httpfence.HeaderDomain)
		}
		return wr, err
	}
	if err := s.authorizeWrite(r.Context(), wr); err != nil {
		return wr, err
	}
	tok, err := httpfence.ParseToken(r.Header)
	if err != nil && !(s.cfg.DisableFencing && errors.Is(err, fencelock.ErrMissingToken)) {
		return wr, err
	}
	wr.token = tok
	if v := s.cfg.Verifier; v != nil && !s.cfg.DisableFencing {
		if _, err := v.VerifyWrite(r.Header.Get(httpfence.HeaderSequencer), fencelock.LockName(wr.domain), tok); err != nil {
			return wr, err
		}
	}
	wr.ifMatch = strings.TrimSpace(r.Header.Get("If-Match"))
	wr.ifNoneMatch = strings.TrimSpace(r.Header.Get("If-None-Match"))
	if wr.ifNoneMatch != "" && wr.ifNoneMatch != "*" {
		return wr, fmt.Errorf("If-None-Match on a write must be *, got %q: %w", wr.ifNoneMatch, fencelock.ErrInvalidArgument)
	}
	if op == opCheck && (wr.ifMatch != "" || wr.ifNoneMatch != "") {
		return wr, fmt.Errorf("a fence has no ETag, drop If-Match and If-None-Match: %w", fencelock.ErrInvalidArgument)
	}
	wr.idemKey = r.Header.Get(HeaderIdempotencyKey)
	if err := validateIdempotencyKey(wr.idemKey); err != nil {
		return wr, err
	}
	if wr.idemKey != "" { // a key means one request of one caller, to one object
		wr.idemKey = acl.IdentityOf(r.Context()) + "\x00" + key + "\x00" + wr.idemKey
	}
	return wr, nil
}

// authorizeWrite checks that the caller in ctx holds acl.Lock on wr's fence
// domain and, for a write of an object, on its key as well: a grant on a
// domain does not reach keys outside the caller's own grants.
func (s *Server) authorizeWrite(ctx context.Context, wr write) error {
	if wr.op != opCheck {
		if err := s.cfg.ACL.Check(ctx, acl.Lock, wr.key); err != nil {
			return err
		}
	}
	return s.cfg.ACL.Check(ctx, acl.Lock, wr.domain)
}

func validateIdempotencyKey(k string) error {
	if len(k) > MaxIdempotencyKeyLen {
		return fmt.Errorf("%s is %d bytes, the limit is %d: %w", HeaderIdempotencyKey, len(k), MaxIdempotencyKeyLen, fencelock.ErrInvalidArgument)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return fmt.Errorf("%s must be printable ASCII without spaces: %w", HeaderIdempotencyKey, fencelock.ErrInvalidArgument)
		}
	}
	return nil
}

// precheck refuses a stale write before its body is read, so a zombie does
// not upload 64 MiB for nothing. The authoritative check is in apply. A
// write whose Idempotency-Key was seen skips it: its first answer wins.
func (s *Server) precheck(wr write) error {
	if s.cfg.DisableFencing {
		return nil
	}
	return s.db.View(func(tx *bolt.Tx) error {
		if wr.idemKey != "" {
			if _, seen, err := idempotencyOf(tx, wr.idemKey, time.Now(), s.cfg.IdempotencyTTL); err != nil || seen {
				return err
			}
		}
		highest, _ := highestIn(tx, wr.domain)
		return fence.Admit(wr.domain, highest, wr.token)
	})
}

func (s *Server) handlePut(w http.ResponseWriter, r *http.Request, key string) {
	wr, err := s.parseWrite(r, opPut, key, "")
	if err != nil {
		s.refuse(w, r, wr, err)
		return
	}
	if r.ContentLength > s.cfg.MaxObjectSize {
		s.fail(w, r, fmt.Errorf("body is %d bytes, the limit is %d: %w", r.ContentLength, s.cfg.MaxObjectSize, fencelock.ErrTooLarge))
		return
	}
	if err := s.precheck(wr); err != nil {
		s.refuse(w, r, wr, err)
		return
	}
	// Bodies are read whole before the write: the bytes buffered at once
	// are bounded by MaxBufferedBytes (a body of unknown length counts as
	// the largest allowed).
	want := r.ContentLength
	if want < 0 {
		want = s.cfg.MaxObjectSize
	}
	if err := s.buffered.Acquire(r.Context(), want); err != nil {
		s.fail(w, r, fmt.Errorf("wait for room to buffer the body: %w: %w", fencelock.ErrUnavailable, err))
		return
	}
	defer s.buffered.Release(want)
	wr.body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxObjectSize))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		s.fail(w, r, fmt.Errorf("body exceeds the limit of %d bytes: %w", s.cfg.MaxObjectSize, fencelock.ErrTooLarge))
		return
	}
	if err != nil {
		s.fail(w, r, fmt.Errorf("read body: %w: %w", fencelock.ErrInvalidArgument, err))
		return
	}
	s.applyAndAnswer(w, r, wr)
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request, key string) {
	wr, err := s.parseWrite(r, opDelete, key, "")
	if err != nil {
		s.refuse(w, r, wr, err)
		return
	}
	s.applyAndAnswer(w, r, wr)
}

func (s *Server) handlePostFence(w http.ResponseWriter, r *http.Request, domain string) {
	wr, err := s.parseWrite(r, opCheck, "", domain)
	if err != nil {
		s.refuse(w, r, wr, err)
		return
	}
	s.applyAndAnswer(w, r, wr)
}

// refuse answers a write refused before apply, counting fence refusals.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, wr write, err error) {
	if errors.Is(err, fencelock.ErrStaleToken) || errors.Is(err, fencelock.ErrMissingToken) {
		s.observe(wr, resultOf(err))
	}
	s.fail(w, r, err)
}

func (s *Server) applyAndAnswer(w http.ResponseWriter, r *http.Request, wr write) {
	ans, replayed, err := s.apply(r.Context(), wr)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	ans.write(w)
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request, key string) {
	if err := ValidateKey(key); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.cfg.ACL.Check(r.Context(), acl.Read, key); err != nil {
		s.fail(w, r, err)
		return
	}
	var (
		rec    record
		exists bool
		data   []byte
	)
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		if rec, exists, err = recordOf(tx, key); err != nil || !exists {
			return err
		}
		data = append([]byte(nil), tx.Bucket(bucketData).Get([]byte(key))...)
		return nil
	})
	switch {
	case err != nil:
		s.fail(w, r, fmt.Errorf("read object %q: %w", key, err))
		return
	case !exists:
		s.fail(w, r, fmt.Errorf("object %q: %w", key, fencelock.ErrNotFound))
		return
	}
	if im := strings.TrimSpace(r.Header.Get("If-Match")); im != "" && !etagMatches(im, rec.ETag) {
		s.fail(w, r, fmt.Errorf("If-Match %s: the current ETag is %s: %w", im, rec.ETag, fencelock.ErrPreconditionFailed))
		return
	}
	h := w.Header()
	h.Set("ETag", rec.ETag)
	if rec.Token != 0 { // only an unfenced store stores tokenless writes
		h.Set(httpfence.HeaderToken, rec.Token.String())
	}
	h.Set(httpfence.HeaderDomain, rec.Domain)
	h.Set("Last-Modified", rec.Modified.Format(http.TimeFormat))
	if inm := strings.TrimSpace(r.Header.Get("If-None-Match")); inm != "" && etagMatches(inm, rec.ETag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(data)
	}
}

func (s *Server) handleGetFence(w http.ResponseWriter, r *http.Request, domain string) {
	if err := ValidateDomain(domain); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.cfg.ACL.Check(r.Context(), acl.Read, domain); err != nil {
		s.fail(w, r, err)
		return
	}
	var highest fencelock.Token
	err := s.db.View(func(tx *bolt.Tx) error {
		highest, _ = highestIn(tx, domain)
		return nil
	})
	if err != nil {
		s.fail(w, r, fmt.Errorf("read fence %q: %w", domain, err))
		return
	}
	answer{Status: http.StatusOK, Body: mustJSON(FenceInfo{Domain: domain, Highest: highest})}.write(w)
}
