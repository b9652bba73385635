package recovery

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/ratelimit"
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

	// maxDrain bounds what is read of a body refused as too large before
	// the refusal is sent: a client still writing its body when the
	// connection closes gets a reset, not the answer, so a body up to this
	// size is read and dropped (as net/http does for a kept-alive
	// connection), and one beyond it is cut off.
	maxDrain = 256 << 10
	// maxHeader bounds a request's headers; a real one has a handful.
	maxHeader = 8 << 10
)

// refusedMessage is the one answer to every refused request, so the
// endpoint tells a prober nothing (whether a Remote exists, which check
// failed); the manager's log says why.
const refusedMessage = "recovery refused"

// rotationAnnotation on a pull Remote is the fleet manager's record of the
// last rotation of its recovery key, a rotation as JSON: public keys and a
// time, nothing secret. Like every fleeet.dev/ key, only the manager may
// write it.
const rotationAnnotation = "fleeet.dev/recovery-rotation"

// rotation is a rotation of a Remote's recovery key from From to To at At,
// made by the request signed with From that named To.
type rotation struct {
	From string    `json:"from"`
	To   string    `json:"to"`
	At   time.Time `json:"at"`
}

// errRemoteBusy refuses a request signed with its Remote's key beyond the
// Remote's allowance.
var errRemoteBusy = errors.New("too many recovery requests signed with this Remote's key")

// Server is the fleet manager's recovery endpoint: it answers Requests
// signed with a Remote's current recovery key by rotating the key (single
// use: the write is conditional on the Remote not having changed since it
// was read) and minting a first credential for the cluster's identity.
//
// The answer can be lost after the rotation, leaving the agent with a key
// the Remote no longer names. So the request that made the last rotation,
// signed with the key rotated away and naming the key rotated to, is
// answered once more within limits.answerGrace of it: a new first
// credential and no rotation, the same result as the lost answer (the
// agent resends its request unchanged when it got none, see Recover). A
// request naming any other key is refused, so an old key cannot take the
// Remote back, and so is every request once the Remote names another key
// (fleetctl reenrol).
type Server struct {
	// Client reads Remotes from the manager's cache to screen requests,
	// writes the Remote and mints tokens.
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

	// limits are defaultLimits unless a test shortens them.
	limits limits

	setup sync.Once
	// perAddress holds each client address's allowance, perRemote each
	// Remote's (namespace/name).
	perAddress, perRemote *ratelimit.PerKey
}

// refused is a request turned down; why is logged, never answered.
type refused struct{ why string }

func (r refused) Error() string { return r.why }

func (s *Server) init() {
	s.setup.Do(func() {
		s.limits = s.limits.orDefaults()
		s.perAddress, s.perRemote = newBuckets(s.limits.perAddress), newBuckets(s.limits.perRemote)
	})
}

// ServeHTTP answers one recovery Request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.init()
	if r.Method != http.MethodPost || r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	from, _, _ := net.SplitHostPort(r.RemoteAddr)
	if !s.perAddress.For(clientOf(r.RemoteAddr)).Allow() {
		http.Error(w, "too many recovery requests from this address; retry later", http.StatusTooManyRequests)
		return
	}
	if r.ContentLength > maxBody {
		refuseTooLarge(w, r)
		return
	}
	var req Request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			refuseTooLarge(w, r)
			return
		}
		s.Log.Info("Recovery request unreadable", "from", from, "error", err.Error())
		http.Error(w, refusedMessage, http.StatusForbidden)
		return
	}
	log := s.Log.WithValues("from", from, "remote", req.Namespace+"/"+req.Remote)
	// A request holds its connection no longer than its answer may take.
	ctx, cancel := context.WithTimeout(r.Context(), s.limits.writeTimeout)
	defer cancel()
	resp, err := s.recover(ctx, req, from)
	if err != nil {
		if why, ok := errors.AsType[refused](err); ok {
			log.Info("Recovery refused", "reason", why.why)
			http.Error(w, refusedMessage, http.StatusForbidden)
			return
		}
		if errors.Is(err, errRemoteBusy) {
			log.Info("Recovery refused", "reason", err.Error())
			http.Error(w, "too many recovery requests for this Remote; retry later", http.StatusTooManyRequests)
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

// refuseTooLarge answers a request whose body is beyond maxBody with 413,
// once the body is read up to maxDrain, so that a client still sending it
// gets the answer rather than a reset connection.
func refuseTooLarge(w http.ResponseWriter, r *http.Request) {
	_, _ = io.CopyN(io.Discard, r.Body, maxDrain)
	http.Error(w, "recovery request too large", http.StatusRequestEntityTooLarge)
}

// wellFormed checks what needs no lookup: the names, the timestamp, the
// new key and the signature's size.
func (r Request) wellFormed(now time.Time) error {
	if errs := validation.IsDNS1123Label(r.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace: %s", strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(r.Remote); len(errs) > 0 {
		return fmt.Errorf("remote: %s", strings.Join(errs, "; "))
	}
	if d := now.Sub(r.Timestamp); d > window || d < -window {
		return fmt.Errorf("timestamp %s is more than %s from now", r.Timestamp.UTC().Format(time.RFC3339), window)
	}
	if _, err := ParsePublicKey(r.NewKey); err != nil {
		return fmt.Errorf("newKey: %w", err)
	}
	if len(r.Signature) != ed25519.SignatureSize {
		return errors.New("signature: not an Ed25519 signature")
	}
	return nil
}

// recover checks the request and, when it holds, rotates the Remote's key
// and mints the first credential.
func (s *Server) recover(ctx context.Context, req Request, from string) (Response, error) {
	if err := req.wellFormed(time.Now()); err != nil {
		return Response{}, refused{err.Error()}
	}
	key := client.ObjectKey{Namespace: req.Namespace, Name: req.Remote}
	// Screened against the manager's cache first, so that forged requests
	// cost the apiserver nothing and only requests the Remote's key signed
	// are charged to its allowance: a flood of forged requests naming a
	// Remote never keeps its agent out.
	cached, err := readRemote(ctx, s.Client, key)
	if err != nil {
		return Response{}, err
	}
	if _, err := s.signed(cached, req); err != nil {
		return Response{}, err
	}
	if !s.perRemote.For(key.String()).Allow() {
		return Response{}, errRemoteBusy
	}
	// Tried again after a conflict: a twin of this request may have won,
	// and this one is then answered once more.
	for range 2 {
		remote, err := readRemote(ctx, s.Reader, key)
		if err != nil {
			return Response{}, err
		}
		again, err := s.signed(remote, req)
		if err != nil {
			return Response{}, err
		}
		resp, err := s.grant(ctx, req, remote, again, from)
		if !apierrors.IsConflict(err) {
			return resp, err
		}
	}
	return Response{}, refused{"the Remote changed while recovering: a concurrent or replayed request"}
}

// readRemote reads the Remote at key with r; a Remote that does not exist
// is a refusal.
func readRemote(ctx context.Context, r client.Reader, key client.ObjectKey) (*fleeetv1.Remote, error) {
	remote := &fleeetv1.Remote{}
	if err := r.Get(ctx, key, remote); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, refused{"no such Remote"}
		}
		return nil, fmt.Errorf("reading the Remote: %w", err)
	}
	return remote, nil
}

// signed checks that req is signed with remote's current recovery key, or
// is the request that made remote's last rotation, within answerGrace of
// it: then again is true.
func (s *Server) signed(remote *fleeetv1.Remote, req Request) (again bool, err error) {
	current := remote.Annotations[fleeetv1.RecoveryKeyAnnotation]
	key, err := ParsePublicKey(current)
	if err != nil {
		return false, refused{fmt.Sprintf("metadata.annotations[%s]: %v", fleeetv1.RecoveryKeyAnnotation, err)}
	}
	if req.verify(key) {
		return false, nil
	}
	var last rotation
	if json.Unmarshal([]byte(remote.Annotations[rotationAnnotation]), &last) == nil &&
		last.To == current && req.NewKey == current && time.Since(last.At) < s.limits.answerGrace {
		if previous, err := ParsePublicKey(last.From); err == nil && req.verify(previous) {
			return true, nil
		}
	}
	return false, refused{"the signature is not the Remote's current recovery key's: an old key, or a replay after the key was rotated"}
}

// grant mints a first credential for the identity of remote, whose key
// signed req, and rotates the key to req.NewKey, recording the rotation.
// Again, req already rotated it: grant forgets the rotation instead, so
// that req is answered once more at most. The write is conditional on the
// version read: of two requests granted from one version, one conflicts.
func (s *Server) grant(ctx context.Context, req Request, remote *fleeetv1.Remote, again bool, from string) (Response, error) {
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
	// Minted before the write, so a rotated key always comes with a
	// credential; a token whose write loses is never sent anywhere.
	token, err := credential.Mint(ctx, s.Client, req.Namespace, name, credential.FirstLifetime, nil)
	if err != nil {
		return Response{}, err
	}
	note := "The cluster proved it holds the recovery key, from %s; the key is rotated and a new credential issued"
	if again {
		delete(remote.Annotations, rotationAnnotation)
		note = "The request that rotated the cluster's recovery key came again, from %s, its answer lost; a new credential is issued, once"
	} else {
		record, _ := json.Marshal(rotation{From: remote.Annotations[fleeetv1.RecoveryKeyAnnotation], To: req.NewKey, At: time.Now().UTC()})
		remote.Annotations[rotationAnnotation] = string(record)
		remote.Annotations[fleeetv1.RecoveryKeyAnnotation] = req.NewKey
	}
	if err := s.Client.Update(ctx, remote); err != nil {
		if apierrors.IsConflict(err) {
			return Response{}, err
		}
		return Response{}, fmt.Errorf("rotating metadata.annotations[%s]: %w", fleeetv1.RecoveryKeyAnnotation, err)
	}
	s.Recorder.Eventf(remote, nil, corev1.EventTypeNormal, fleeetv1.ReasonRecovered, "Recover", note, from)
	return Response{Token: token.Value, ExpiresAt: token.ExpiresAt}, nil
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

	// limits are defaultLimits unless a test shortens them.
	limits limits
}

// Add runs the recovery endpoint with mgr, as mgr's identity, when
// o.BindAddress is set.
func Add(mgr ctrl.Manager, name string, o Options) error {
	if o.BindAddress == "" {
		return nil
	}
	s := &Server{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(name),
		Grace: cmp.Or(o.Grace, DefaultGrace), Log: mgr.GetLogger().WithName("recovery"), limits: o.limits}
	certs, err := certwatcher.New(filepath.Join(o.CertDir, "tls.crt"), filepath.Join(o.CertDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("--recovery-cert-dir: %w", err)
	}
	if err := mgr.Add(certs); err != nil {
		return err
	}
	return mgr.Add(everyReplica(func(ctx context.Context) error {
		ln, err := net.Listen("tcp", o.BindAddress)
		if err != nil {
			return fmt.Errorf("serving the recovery endpoint: %w", err)
		}
		return serve(ctx, ln, s, certs.GetCertificate, o.limits.orDefaults())
	}))
}

// serve answers h over TLS on ln, within l, until ctx ends.
func serve(ctx context.Context, ln net.Listener, h http.Handler, certificate func(*tls.ClientHelloInfo) (*tls.Certificate, error), l limits) error {
	// HTTP/1 only: HTTP/2 would multiplex requests on one connection,
	// beyond the connection bounds.
	var http1 http.Protocols
	http1.SetHTTP1(true)
	srv := &http.Server{Handler: h, Protocols: &http1, MaxHeaderBytes: maxHeader,
		ReadHeaderTimeout: l.readTimeout, ReadTimeout: l.readTimeout, WriteTimeout: l.writeTimeout, IdleTimeout: l.idleTimeout,
		TLSConfig: &tls.Config{GetCertificate: certificate, MinVersion: tls.VersionTLS12}}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ServeTLS(newLimitListener(ln, l.connections, l.connectionsPerAddress), "", ""); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving the recovery endpoint on %s: %w", ln.Addr(), err)
	}
	return nil
}

// everyReplica runs on every manager replica, leader or not: the Service
// may send a request to any, and the rotation's precondition keeps them
// from granting two recoveries with one key.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

func (everyReplica) NeedLeaderElection() bool { return false }
