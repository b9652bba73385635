package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// sessionCookie carries the identifier of a browser's login session. The
// bearer token it logged in with stays in the dashboard's memory: a cookie
// that leaks (a shared machine, a proxy's log) is worth at most what is
// left of the session, never the token.
const sessionCookie = "fleeet-dashboard-session"

const (
	// defaultSessionIdle and defaultSessionMaxAge end a session after a
	// quarter of an hour unused, and an hour after login whatever.
	defaultSessionIdle   = 15 * time.Minute
	defaultSessionMaxAge = time.Hour
	// maxSessions bounds the sessions kept; the oldest login goes first.
	maxSessions = 10000
)

// loginSessions maps session identifiers to the token each logged in
// with, in memory: a restart logs everyone out.
type loginSessions struct {
	idle, maxAge time.Duration
	max          int

	mu sync.Mutex
	// byID is keyed by the identifier's SHA-256, so that looking one up
	// compares hashes, not secrets.
	byID map[[32]byte]*loginSession
}

type loginSession struct {
	token         string
	created, used time.Time
}

func newLoginSessions(idle, maxAge time.Duration) *loginSessions {
	return &loginSessions{idle: idle, maxAge: maxAge, max: maxSessions, byID: map[[32]byte]*loginSession{}}
}

// start opens a session for token and returns its identifier: 256 random
// bits.
func (s *loginSessions) start(token string, now time.Time) string {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // crypto/rand.Read never fails
	id := base64.RawURLEncoding.EncodeToString(raw)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byID) >= s.max {
		s.dropExpired(now)
	}
	for len(s.byID) >= s.max {
		var oldest [32]byte
		var at *loginSession
		for k, ls := range s.byID {
			if at == nil || ls.created.Before(at.created) {
				oldest, at = k, ls
			}
		}
		delete(s.byID, oldest)
	}
	s.byID[sha256.Sum256([]byte(id))] = &loginSession{token: token, created: now, used: now}
	return id
}

// token returns the token of the live session id and marks it used; an
// unknown, ended or expired session returns false.
func (s *loginSessions) token(id string, now time.Time) (string, bool) {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	ls, ok := s.byID[key]
	if !ok {
		return "", false
	}
	if s.expired(ls, now) {
		delete(s.byID, key)
		return "", false
	}
	ls.used = now
	return ls.token, true
}

// end forgets session id: its cookie opens nothing any more.
func (s *loginSessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sha256.Sum256([]byte(id)))
}

func (s *loginSessions) expired(ls *loginSession, now time.Time) bool {
	return now.Sub(ls.used) >= s.idle || now.Sub(ls.created) >= s.maxAge
}

func (s *loginSessions) dropExpired(now time.Time) {
	for k, ls := range s.byID {
		if s.expired(ls, now) {
			delete(s.byID, k)
		}
	}
}
