package recovery

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
)

const (
	// DefaultGrace is how long after a cluster was last seen it may still
	// recover by itself; beyond it, only fleetctl reenrol brings it back.
	DefaultGrace = 90 * 24 * time.Hour

	// window is how far a request's timestamp may be from the manager's
	// clock: a captured request is useless after it (and before it, the
	// key rotation makes it single use).
	window = 5 * time.Minute

	// maxBody bounds a request; a real one is a few hundred bytes.
	maxBody = 4 << 10

	// maxClients bounds the per-client limiters kept; beyond it they are
	// forgotten at once, and the overall limit still holds.
	maxClients = 4096
)

// refusedMessage is the one answer to every refused request, so the
// endpoint tells a prober nothing (whether a Remote exists, which check
// failed); the manager's log says why.
const refusedMessage = "recovery refused"

// Server is the fleet manager's recovery endpoint: it answers Requests
// signed with a Remote's current recovery key by rotating the key (single
// use: the write is conditional on the Remote not having changed since it
// was read) and minting a first credential for the cluster's identity.
type Server struct {
	// Client writes the Remote and mints tokens.
	Client client.Client
	// Reader reads Remotes and identities uncached, so the rotation's
	// precondition is the latest version.
	Reader client.Reader
	// Recorder records each recovery as an event on the Remote.
	Recorder events.EventRecorder
	// Grace is how long after its last heartbeat a Remote may recover.
	Grace time.Duration
	// Log says why each request was refused; it never holds a key or token.
	Log logr.Logger

	// overall bounds the requests of all clients, perClient each address's.
	overall   *rate.Limiter
	mu        sync.Mutex
	perClient map[string]*rate.Limiter
}

// refused is a request turned down; why is logged, never answered.
type refused struct{ why string }

func (r refused) Error() string { return r.why }

// ServeHTTP answers one recovery Request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	from, _, _ := net.SplitHostPort(r.RemoteAddr)
	if !s.allow(from) {
		http.Error(w, "too many recovery requests; retry later", http.StatusTooManyRequests)
		return
	}
	var req Request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		s.Log.Info("Recovery request unreadable", "from", from, "error", err.Error())
		http.Error(w, refusedMessage, http.StatusForbidden)
		return
	}
	log := s.Log.WithValues("from", from, "remote", req.Namespace+"/"+req.Remote)
	resp, err := s.recover(r.Context(), req, from)
	if err != nil {
		if why, ok := errors.AsType[refused](err); ok {
			log.Info("Recovery refused", "reason", why.why)
			http.Error(w, refusedMessage, http.StatusForbidden)
			return
		}
		log.Error(err, "Recovery failed")
		http.Error(w, "recovery failed; retry later", http.StatusServiceUnavailable)
		return
	}
	log.Info("Cluster recovered its credential")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// recover checks the request and, when it holds, rotates the Remote's key
// and mints the first credential.
func (s *Server) recover(ctx context.Context, req Request, from string) (Response, error) {
	if d := time.Since(req.Timestamp); d > window || d < -window {
		return Response{}, refused{fmt.Sprintf("timestamp %s is more than %s from now", req.Timestamp.UTC().Format(time.RFC3339), window)}
	}
	if _, err := ParsePublicKey(req.NewKey); err != nil {
		return Response{}, refused{"newKey: " + err.Error()}
	}
	remote := &fleeetv1.Remote{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: req.Remote}, remote); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) {
			return Response{}, refused{"no such Remote"}
		}
		return Response{}, fmt.Errorf("reading the Remote: %w", err)
	}
	current, err := ParsePublicKey(remote.Annotations[fleeetv1.RecoveryKeyAnnotation])
	if err != nil {
		return Response{}, refused{fmt.Sprintf("metadata.annotations[%s]: %v", fleeetv1.RecoveryKeyAnnotation, err)}
	}
	if !req.verify(current) {
		return Response{}, refused{"the signature is not the Remote's current recovery key's: an old key, or a replay after the key was rotated"}
	}
	seen := remote.CreationTimestamp.Time
	if hb := remote.Status.LastHeartbeatTime; hb != nil {
		seen = hb.Time
	}
	if at, err := time.Parse(time.RFC3339, remote.Annotations[fleeetv1.ReenrolledAtAnnotation]); err == nil && at.After(seen) {
		seen = at
	}
	if time.Since(seen) > s.Grace {
		return Response{}, refused{fmt.Sprintf("last seen at %s, longer ago than the recovery grace of %s; use fleetctl reenrol", seen.UTC().Format(time.RFC3339), s.Grace)}
	}
	identity := &corev1.ServiceAccount{}
	name := fleeetv1.RemoteIdentityName(req.Remote)
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: name}, identity); err != nil {
		return Response{}, fmt.Errorf("reading the cluster's identity %s (the Remote identity controller makes it): %w", name, err)
	}
	// Minted before the rotation, so a rotated key always comes with a
	// credential; a token whose rotation loses is never sent anywhere.
	token, err := credential.Mint(ctx, s.Client, req.Namespace, name, credential.FirstLifetime, nil)
	if err != nil {
		return Response{}, err
	}
	// Conditional on the version read: of two requests signed with the
	// same key, concurrent or replayed, one rotates and the other conflicts.
	remote.Annotations[fleeetv1.RecoveryKeyAnnotation] = req.NewKey
	if err := s.Client.Update(ctx, remote); err != nil {
		if apierrors.IsConflict(err) {
			return Response{}, refused{"the Remote changed while recovering: a concurrent or replayed request"}
		}
		return Response{}, fmt.Errorf("rotating metadata.annotations[%s]: %w", fleeetv1.RecoveryKeyAnnotation, err)
	}
	s.Recorder.Eventf(remote, nil, corev1.EventTypeNormal, fleeetv1.ReasonRecovered, "Recover",
		"The cluster proved it holds the recovery key, from %s; the key is rotated and a new credential issued", from)
	return Response{Token: token.Value, ExpiresAt: token.ExpiresAt}, nil
}

// allow applies the overall and the per-client rate limits.
func (s *Server) allow(from string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.overall == nil {
		s.overall = rate.NewLimiter(5, 20)
	}
	if s.perClient == nil || len(s.perClient) >= maxClients {
		s.perClient = map[string]*rate.Limiter{}
	}
	l, ok := s.perClient[from]
	if !ok {
		l = rate.NewLimiter(rate.Every(6*time.Second), 10)
		s.perClient[from] = l
	}
	return l.Allow() && s.overall.Allow()
}

// Options configure the fleet manager's recovery endpoint.
type Options struct {
	// BindAddress is where it listens (host:port); empty serves none.
	BindAddress string
	// CertDir holds its serving certificate, tls.crt and tls.key, reloaded
	// when they change.
	CertDir string
	// Grace is Server.Grace; zero means DefaultGrace.
	Grace time.Duration
}

// Add runs the recovery endpoint with mgr, as mgr's identity, when
// o.BindAddress is set.
func Add(mgr ctrl.Manager, name string, o Options) error {
	if o.BindAddress == "" {
		return nil
	}
	s := &Server{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(name),
		Grace: cmp.Or(o.Grace, DefaultGrace), Log: mgr.GetLogger().WithName("recovery")}
	certs, err := certwatcher.New(filepath.Join(o.CertDir, "tls.crt"), filepath.Join(o.CertDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("--recovery-cert-dir: %w", err)
	}
	if err := mgr.Add(certs); err != nil {
		return err
	}
	return mgr.Add(everyReplica(func(ctx context.Context) error {
		srv := &http.Server{Addr: o.BindAddress, Handler: s, ReadHeaderTimeout: 10 * time.Second,
			TLSConfig: &tls.Config{GetCertificate: certs.GetCertificate, MinVersion: tls.VersionTLS12}}
		go func() {
			<-ctx.Done()
			shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
		}()
		if err := srv.ListenAndServeTLS("", ""); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving the recovery endpoint on %s: %w", o.BindAddress, err)
		}
		return nil
	}))
}

// everyReplica runs on every manager replica, leader or not: the Service
// may send a request to any, and the rotation's precondition keeps them
// from granting two recoveries with one key.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

func (everyReplica) NeedLeaderElection() bool { return false }
