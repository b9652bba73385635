package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"slices"
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
	// maxSessions bounds the sessions kept; while that many are live, a
	// login is refused rather than anyone's session ended.
	maxSessions = 10000
	// maxSessionsPerIdentity bounds one identity's sessions: its own
	// oldest ends first, so that no identity can crowd out another's.
	maxSessionsPerIdentity = 16
)

// errTooManySessions refuses a login while maxSessions are live.
var errTooManySessions = errors.New("too many open login sessions: try again later, or send the token in an Authorization header")

// loginSessions maps session identifiers to the token each logged in
// with, in memory: a restart logs everyone out.
type loginSessions struct {
	idle, maxAge     time.Duration
	max, perIdentity int

	mu sync.Mutex
	// byID is keyed by the identifier's SHA-256, so that looking one up
	// compares hashes, not secrets.
	byID map[[32]byte]*loginSession
	// byIdentity lists each identity's sessions, oldest first.
	byIdentity map[string][][32]byte
}

type loginSession struct {
	token, identity string
	created, used   time.Time
}

func newLoginSessions(idle, maxAge time.Duration) *loginSessions {
	return &loginSessions{idle: idle, maxAge: maxAge, max: maxSessions, perIdentity: maxSessionsPerIdentity,
		byID: map[[32]byte]*loginSession{}, byIdentity: map[string][][32]byte{}}
}

// start opens a session for token, which the apiserver authenticated as
// identity, and returns its identifier: 256 random bits. An identity
// already at perIdentity sessions loses its own oldest; while max sessions
// are live, start opens none.
func (s *loginSessions) start(token, identity string, now time.Time) (string, error) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // crypto/rand.Read never fails
	id := base64.RawURLEncoding.EncodeToString(raw)
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.byIdentity[identity]) >= s.perIdentity {
		s.remove(s.byIdentity[identity][0])
	}
	if len(s.byID) >= s.max {
		s.dropExpired(now)
	}
	if len(s.byID) >= s.max {
		return "", errTooManySessions
	}
	key := sha256.Sum256([]byte(id))
	s.byID[key] = &loginSession{token: token, identity: identity, created: now, used: now}
	s.byIdentity[identity] = append(s.byIdentity[identity], key)
	return id, nil
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
		s.remove(key)
		return "", false
	}
	ls.used = now
	return ls.token, true
}

// end forgets session id: its cookie opens nothing any more.
func (s *loginSessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(sha256.Sum256([]byte(id)))
}

// remove forgets the session under key.
func (s *loginSessions) remove(key [32]byte) {
	ls, ok := s.byID[key]
	if !ok {
		return
	}
	delete(s.byID, key)
	own := slices.DeleteFunc(s.byIdentity[ls.identity], func(k [32]byte) bool { return k == key })
	if len(own) == 0 {
		delete(s.byIdentity, ls.identity)
	} else {
		s.byIdentity[ls.identity] = own
	}
}

func (s *loginSessions) expired(ls *loginSession, now time.Time) bool {
	return now.Sub(ls.used) >= s.idle || now.Sub(ls.created) >= s.maxAge
}

func (s *loginSessions) dropExpired(now time.Time) {
	for k, ls := range s.byID {
		if s.expired(ls, now) {
			s.remove(k)
		}
	}
}
