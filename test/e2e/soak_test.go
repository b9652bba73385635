package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/compile"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/demo"
	"github.com/fleeet-dev/fleeet/internal/recovery"
	"github.com/fleeet-dev/fleeet/internal/testenv"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleettest"
)

var (
	soakFor   = flag.Duration("soak.for", 0, "TestSoak: how long faults are injected into the demo fleet (make soak sets it); 0 skips TestSoak")
	soakEvery = flag.Duration("soak.every", 2*time.Minute, "TestSoak: the mean time between faults")
	soakSeed  = flag.Uint64("soak.seed", 0, "TestSoak: the seed of the faults and changes; 0 takes one from the clock (printed, to run again)")
	soakLogs  = flag.String("soak.logs", "", "TestSoak: a directory to copy every process's log into at the end, to read after the test's own are gone")
)

// TestSoak runs the demo fleet under faults landing at random for
// -soak.for (make soak): see soak.
func TestSoak(t *testing.T) {
	if *soakFor == 0 {
		t.Skip("make soak runs it, with -soak.for")
	}
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	var progress bytes.Buffer
	fleet := demo.Start(t, &progress)
	if err := fleet.WaitConverged(t.Context(), 10*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	runSoak(t, fleet, soakConfig{duration: *soakFor, every: *soakEvery, seed: seed, logs: *soakLogs})
}

// soakConfig says how long a soak injects faults, how often, and from
// which seed.
type soakConfig struct {
	duration, every time.Duration
	seed            uint64
	// logs, when set, is a directory every process's log is copied into
	// at the end.
	logs string
}

// soakConverges bounds how long the fleet takes, once the last fault is
// over, to run every Module Ready at its current version on every cluster:
// an agent's reconnect backoff (up to a minute), a rollout of the last
// change one cluster at a time, and Flux's retry after a failure (a
// minute).
const soakConverges = 6 * time.Minute

// runSoak runs the demo fleet, with its manager replaced by two replicas
// under leader election, while a seeded fault injector kills and restarts
// manager replicas (the leader among them), agents and Flux controllers,
// stops the management apiserver and nodes' kubelets, freezes the
// management etcd (the apiserver up, its storage hanging), cuts clusters
// off the management network or partitions them silently (their Links),
// rotates the management cluster's service-account signing key (every
// cluster's token refused: each agent recovers a credential by itself)
// and fills a tenant namespace's pod quota downstream, and a driver rolls
// the backend Module forward and back, pauses and resumes its rollout,
// gives the frontend new values and rotates the registry password the
// Modules deliver to every cluster.
// A supervisor restarts what dies, as a kubelet restarts a container. It
// checks all along that nothing a plan holds is deleted downstream, that
// no cluster runs a backend version its plan never held, that no more
// than maxUnavailable (1) online clusters are made unavailable by each
// rollout at once, nor more than the manager's --max-moving (1) Remotes
// by both together, and, at the end, that no source credential (rotated
// ones included) or cluster token appears in a log, event or status, that
// the fleet converges within soakConverges once the faults stop, and that
// every cluster then holds every delivered Secret as it is upstream. It
// reports what it injected and every violation with the seed that
// reproduces the run.
func runSoak(t *testing.T, fleet *demo.Fleet, cfg soakConfig) {
	s := &soak{t: t, fleet: fleet, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 0)), start: time.Now(),
		faults: map[string]int{}, held: map[string]map[string]bool{}, unknown: map[string]time.Time{}, moves: map[move]*moveState{}, offline: map[string]bool{}}
	t.Logf("soak: seed %d, faults for %s, one every %s on average", cfg.seed, cfg.duration, cfg.every)
	initial, initialFrontend := s.backendTag(), s.frontendValues()
	tags := s.commitTags(6)
	s.replaceManager()
	rss := s.rss()

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer s.restoreManager()
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { s.supervise(ctx) })
	s.watch(ctx, &wg)

	deadline := time.Now().Add(cfg.duration)
	var drive sync.WaitGroup
	drive.Go(func() { s.change(ctx, deadline, tags) })
	s.inject(ctx, deadline)
	drive.Wait()

	// The faults are over: everything runs again, the rollout is not
	// paused, and the backend and frontend go back to where they started.
	// A run whose draws rotated nothing rotates once now, so that delivery
	// is checked.
	s.recoverAll()
	if len(s.passwords) == 0 {
		s.rotate(ctx)
	}
	s.fleetctl(ctx, time.Minute, "rollout", "resume", demo.Backend)
	s.setBackend(ctx, time.Minute, initial)
	s.setFrontend(ctx, time.Minute, "frontend values as they were", func(values map[string]any) {
		clear(values)
		maps.Copy(values, initialFrontend)
	})
	stopped := time.Now()
	s.waitObserved(ctx)
	if err := fleet.WaitConverged(t.Context(), soakConverges); err != nil {
		s.violate("the fleet did not converge within %s of the last fault: %v", soakConverges, err)
	}
	converged := time.Since(stopped)
	s.checkVersions()
	s.checkDelivered(ctx)
	s.revokeRotatedOut(ctx)
	s.scanSecrets()
	s.report(converged, s.recoveries(ctx), rss, s.rss())
	s.keepLogs()
}

// keepLogs copies every process's log into cfg.logs, when set, named after
// the process.
func (s *soak) keepLogs() {
	if s.cfg.logs == "" {
		return
	}
	if err := os.MkdirAll(s.cfg.logs, 0o700); err != nil {
		s.t.Errorf("keeping the logs: %v", err)
		return
	}
	for _, p := range s.procs {
		data, err := os.ReadFile(p.p.LogPath)
		if err == nil {
			err = os.WriteFile(filepath.Join(s.cfg.logs, strings.ReplaceAll(p.name, "/", "_")+".log"), data, 0o600)
		}
		if err != nil {
			s.t.Errorf("keeping the log of %s: %v", p.name, err)
		}
	}
	s.t.Logf("soak: the processes' logs are in %s", s.cfg.logs)
}

// soak is one soak run's state.
type soak struct {
	t     *testing.T
	fleet *demo.Fleet
	cfg   soakConfig
	start time.Time

	rngMu sync.Mutex
	rng   *rand.Rand

	// procs are the processes the supervisor restarts; managers are the
	// manager replicas among them.
	procs    []*supervised
	managers []*supervised

	mu         sync.Mutex
	faults     map[string]int // injected, by kind
	restarts   int
	changes    int
	violations []string
	// held is, per Remote, every backend tag its plan has held; unknown,
	// since when a cluster has been seen running a tag not among them.
	held    map[string]map[string]bool
	unknown map[string]time.Time
	// moves is what the availability checks know of each Module on each
	// Remote; offline, which Remotes are not Connected.
	moves   map[move]*moveState
	offline map[string]bool
	// plansSeen and versionsChecked count what the checks looked at, so
	// the report shows they ran.
	plansSeen, versionsChecked int
	// passwords are the registry passwords rotated in, which no log,
	// event or status may show either.
	passwords []string
	// quotaRefused counts the pod creations a filled quota refused.
	quotaRefused int
}

// supervised is a process the supervisor keeps running, except while a
// fault holds it down.
type supervised struct {
	name string
	p    *testenv.Process

	mu        sync.Mutex
	downUntil time.Time
}

// move names one Module's sync on one Remote.
type move struct{ module, remote string }

// moveState is what the availability checks know of one Module's sync on
// one Remote.
type moveState struct {
	// held is the sync the plan holds, as JSON: a different one is a move.
	held string
	// ready: the cluster reports the sync Ready with every pod ready at
	// the plan's current generation.
	ready bool
	// costs: the Remote was available when its plan took the sync, so
	// moving it costs the rollout availability (a Remote already
	// unavailable on its old version moves at no cost).
	costs bool
	// arrived: the Remote has been ready on the sync since its plan took
	// it; what makes it unavailable later is a fault, not the rollout.
	arrived bool
}

func (s *soak) intn(n int) int {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.IntN(n)
}

// between is a random duration in [lo, hi).
func (s *soak) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.intn(int(hi-lo)/int(time.Millisecond)))*time.Millisecond
}

func (s *soak) logf(format string, args ...any) {
	s.t.Logf("soak +%4.0fs: %s", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

func (s *soak) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.violations = append(s.violations, fmt.Sprintf("+%.0fs %s", time.Since(s.start).Seconds(), msg))
	s.mu.Unlock()
	s.logf("VIOLATION (seed %d): %s", s.cfg.seed, msg)
}

// commitTags commits n good backend versions to roll between.
func (s *soak) commitTags(n int) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprintf("v9.%d.0", i)
		s.fleet.CommitBackend(s.t, tags[i], nil)
	}
	return tags
}

func (s *soak) backendTag() string {
	m := &fleeetv1.Module{}
	if err := s.fleet.Management.Client.Get(s.t.Context(), client.ObjectKey{Namespace: demo.Tenant, Name: demo.Backend}, m); err != nil {
		s.t.Fatal(err)
	}
	return m.Spec.Sync.Source.Git.Tag
}

// frontendValues is the frontend Module's Helm values now.
func (s *soak) frontendValues() map[string]any {
	m := &fleeetv1.Module{}
	if err := s.fleet.Management.Client.Get(s.t.Context(), client.ObjectKey{Namespace: demo.Tenant, Name: demo.Frontend}, m); err != nil {
		s.t.Fatal(err)
	}
	values := map[string]any{}
	if err := json.Unmarshal(m.Spec.Sync.Package.Helm.Values.Raw, &values); err != nil {
		s.t.Fatal(err)
	}
	return values
}

// replaceManager stops the demo's manager and runs two replicas under
// leader election with short leases: the first serves the admission
// webhooks where the apiserver calls them, the second on a port of its own.
func (s *soak) replaceManager() {
	if err := s.fleet.Manager.Stop(30 * time.Second); err != nil {
		s.t.Fatal(err)
	}
	flags := append(slices.Clone(s.fleet.ManagerFlags), "--max-moving="+strconv.Itoa(soakMaxMoving), "--leader-elect", "--leader-election-namespace=fleeet-system",
		"--leader-election-lease-duration=8s", "--leader-election-renew-deadline=6s", "--leader-election-retry-period=1s")
	for i := range 2 {
		extra := []string{}
		if i == 1 {
			_, port, err := net.SplitHostPort(testenv.FreeAddr(s.t))
			if err != nil {
				s.t.Fatal(err)
			}
			// The agents' recovery requests reach the first replica; the
			// second serves its endpoint where nothing calls it.
			extra = append(extra, "--webhook-port="+port, "--recovery-bind-address="+testenv.FreeAddr(s.t))
		}
		p := testenv.StartManagerProcess(s.t, s.fleet.ManagerBin, s.fleet.Management, append(slices.Clone(flags), extra...)...)
		s.managers = append(s.managers, &supervised{name: fmt.Sprintf("manager-%d", i), p: p})
	}
	s.procs = append(s.procs, s.managers...)
	for _, name := range demo.Names {
		s.procs = append(s.procs, &supervised{name: name + "/agent", p: s.fleet.Agents[name]},
			&supervised{name: name + "/kubelet", p: s.fleet.Nodes[name].Kubelet})
		for _, c := range []testenv.FluxController{testenv.SourceController, testenv.KustomizeController, testenv.HelmController} {
			s.procs = append(s.procs, &supervised{name: name + "/" + string(c), p: s.fleet.Flux[name][c]})
		}
	}
	s.logf("manager replaced by two replicas under leader election")
}

// restoreManager stops the replicas, once nothing restarts them, and runs
// the demo's own manager again, as the fleet was before the soak.
func (s *soak) restoreManager() {
	for _, m := range s.managers {
		if err := m.p.Stop(30 * time.Second); err != nil {
			s.t.Errorf("stopping %s: %v", m.name, err)
		}
	}
	if err := s.fleet.Manager.Restart(); err != nil {
		s.t.Fatal(err)
	}
}

// restartBackoff is the least time between two restarts of a process.
const restartBackoff = 2 * time.Second

// supervise restarts every process that exited once no fault holds it
// down, at most once per restartBackoff.
func (s *soak) supervise(ctx context.Context) {
	for sleep(ctx, 500*time.Millisecond) {
		for _, p := range s.procs {
			p.mu.Lock()
			if exited, _ := p.p.Exited(); exited && time.Now().After(p.downUntil) {
				p.downUntil = time.Now().Add(restartBackoff)
				if err := p.p.Restart(); err != nil {
					s.logf("restarting %s: %v", p.name, err)
				} else {
					s.mu.Lock()
					s.restarts++
					s.mu.Unlock()
				}
			}
			p.mu.Unlock()
		}
	}
}

// down kills p (SIGKILL, or SIGTERM with a grace when stop) and holds it
// down for hold.
func (p *supervised) down(stop bool, hold time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.downUntil = time.Now().Add(hold)
	if stop {
		_ = p.p.Stop(10 * time.Second)
		return
	}
	p.p.Kill()
}

// recoverAll releases every hold so the supervisor restarts what is down,
// and waits until it has.
func (s *soak) recoverAll() {
	for _, p := range s.procs {
		p.mu.Lock()
		p.downUntil = time.Time{}
		p.mu.Unlock()
	}
	for _, p := range s.procs {
		for range 60 {
			p.mu.Lock()
			exited, _ := p.p.Exited()
			p.mu.Unlock()
			if !exited {
				break
			}
			time.Sleep(time.Second)
		}
	}
}

// inject injects a fault at random intervals until deadline.
func (s *soak) inject(ctx context.Context, deadline time.Time) {
	for {
		wait := s.between(s.cfg.every/2, s.cfg.every*3/2)
		if time.Now().Add(wait).After(deadline) || !sleep(ctx, wait) {
			return
		}
		kind, what := s.fault(ctx)
		s.mu.Lock()
		s.faults[kind]++
		s.mu.Unlock()
		s.logf("fault: %s", what)
	}
}

// fault injects one fault, chosen at random, and says which.
func (s *soak) fault(ctx context.Context) (kind, what string) {
	cluster := demo.Names[s.intn(len(demo.Names))]
	switch s.intn(9) {
	case 0:
		replica := s.managers[s.intn(len(s.managers))]
		before := s.leader(ctx)
		replica.down(false, s.between(0, 10*time.Second))
		kind = "kill a manager standby"
		// The Lease changes hands within its duration (8 s) when the
		// leader died.
		for end := time.Now().Add(12 * time.Second); time.Now().Before(end) && sleep(ctx, 500*time.Millisecond); {
			if after := s.leader(ctx); before != "" && after != before {
				kind = "kill the manager leader"
				break
			}
		}
		return kind, kind + " (" + replica.name + ")"
	case 1:
		s.proc(cluster+"/agent").down(false, s.between(0, 40*time.Second))
		return "kill an agent", "kill the agent of " + cluster
	case 2:
		c := []string{"source-controller", "kustomize-controller", "helm-controller"}[s.intn(3)]
		s.proc(cluster+"/"+c).down(false, s.between(0, 15*time.Second))
		return "kill a Flux controller", "kill " + c + " of " + cluster
	case 3:
		outage := s.between(10*time.Second, 40*time.Second)
		if err := s.fleet.Management.StopAPIServer(); err != nil {
			s.logf("stopping the management apiserver: %v", err)
		}
		sleep(ctx, outage)
		if err := s.fleet.Management.StartAPIServer(); err != nil {
			s.violate("the management apiserver did not start again: %v", err)
		}
		return "stop the management apiserver", fmt.Sprintf("stop the management apiserver for %s", outage.Round(time.Second))
	case 4:
		freeze := s.between(10*time.Second, 40*time.Second)
		if err := s.fleet.Management.FreezeEtcd(ctx, freeze); err != nil {
			s.violate("freezing the management etcd: %v", err)
		}
		return "freeze the management etcd", fmt.Sprintf("freeze the management etcd for %s", freeze.Round(time.Second))
	case 5:
		// Past --offline-grace (20 s) at times, so the manager sees the
		// Remote offline; the agent must keep all it runs meanwhile.
		// A silent partition (Hold) breaks nothing: the agent finds out
		// only from its own timeouts.
		cut, link := s.between(10*time.Second, 90*time.Second), s.fleet.Links[cluster]
		if s.intn(2) == 0 {
			link.Hold()
			sleep(ctx, cut)
			link.Release()
			return "partition a cluster silently", fmt.Sprintf("drop everything between %s and the management network for %s", cluster, cut.Round(time.Second))
		}
		link.Cut()
		sleep(ctx, cut)
		if err := link.Restore(); err != nil {
			s.violate("the network of %s did not come back: %v", cluster, err)
		}
		return "cut a cluster off the management network", fmt.Sprintf("cut %s off the management network for %s", cluster, cut.Round(time.Second))
	case 6:
		// Every token the agents hold is refused from now on, as when
		// they expire while the clusters are away: each agent must get a
		// new credential from the recovery endpoint by itself, keeping
		// all it runs meanwhile.
		s.fleet.Management.RotateServiceAccountKey(s.t)
		return "reject every cluster's credential", "rotate the management cluster's service-account signing key: every cluster's token refused"
	case 7:
		hold := s.between(20*time.Second, 90*time.Second)
		refused, err := s.fillQuota(ctx, cluster, hold)
		if err != nil {
			s.logf("filling the quota of %s: %v", cluster, err)
		}
		s.mu.Lock()
		s.quotaRefused += refused
		s.mu.Unlock()
		return "fill a tenant's quota", fmt.Sprintf("fill the pod quota of %s's tenant namespace for %s (%d pod creations refused)", cluster, hold.Round(time.Second), refused)
	default:
		hold := s.between(20*time.Second, 60*time.Second)
		s.proc(cluster+"/kubelet").down(true, hold)
		return "stop a kubelet", fmt.Sprintf("stop the kubelet of %s for %s", cluster, hold.Round(time.Second))
	}
}

// fillQuota holds the tenant namespace of cluster at the pods it runs for
// hold, with a ResourceQuota whose limit is what it uses: a version that
// needs a new pod cannot get it until the quota is lifted (Flux's wait
// fails if that takes past its timeout). It returns how many pod creations
// the quota refused, as the ReplicaSets' events count them.
func (s *soak) fillQuota(ctx context.Context, cluster string, hold time.Duration) (int, error) {
	c := s.fleet.Downstream[cluster].Client
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(demo.Tenant)); err != nil {
		return 0, err
	}
	running := 0
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			running++
		}
	}
	quota := &corev1.ResourceQuota{
		// A name of its own, so that the events name this fault alone.
		ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: fmt.Sprintf("soak-full-%d", time.Now().UnixMilli())},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(running), resource.DecimalSI)}},
	}
	if err := c.Create(ctx, quota); err != nil {
		return 0, err
	}
	sleep(ctx, hold)
	ctx = context.WithoutCancel(ctx)
	if err := c.Delete(ctx, quota); client.IgnoreNotFound(err) != nil {
		return 0, err
	}
	events := &corev1.EventList{}
	if err := c.List(ctx, events, client.InNamespace(demo.Tenant)); err != nil {
		return 0, err
	}
	return eventCount(events, func(e corev1.Event) bool {
		return e.Reason == "FailedCreate" && strings.Contains(e.Message, "exceeded quota: "+quota.Name+",")
	}), nil
}

// eventCount is how many times the events that match were recorded.
func eventCount(events *corev1.EventList, match func(corev1.Event) bool) int {
	n := 0
	for _, e := range events.Items {
		if match(e) {
			n += int(max(e.Count, 1))
		}
	}
	return n
}

func (s *soak) proc(name string) *supervised {
	for _, p := range s.procs {
		if p.name == name {
			return p
		}
	}
	s.t.Fatalf("no process %s", name)
	return nil
}

// leader is the identity holding the manager's leader Lease, or "".
func (s *soak) leader(ctx context.Context) string {
	lease := &coordinationv1.Lease{}
	if err := s.fleet.Management.Client.Get(ctx, client.ObjectKey{Namespace: "fleeet-system", Name: "fleet-manager.fleeet.dev"}, lease); err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// change changes the fleet at random intervals until deadline: the
// backend Module's next version mostly, sometimes the one before (a
// rollback by hand), sometimes a rotation of the registry password the
// frontend pulls with (delivered to every cluster), sometimes a new colour
// for the frontend (its release upgraded, its pods replaced, so both
// Modules' rollouts move Remotes under one --max-moving), sometimes a
// pause of the backend's rollout, resumed a little later.
func (s *soak) change(ctx context.Context, deadline time.Time, tags []string) {
	next := 0
	for {
		wait := s.between(20*time.Second, 60*time.Second)
		if time.Now().Add(wait).After(deadline) || !sleep(ctx, wait) {
			return
		}
		switch n := s.intn(14); {
		case n < 7:
			s.setBackend(ctx, time.Minute, tags[next%len(tags)])
			next++
		case n < 9 && next > 1:
			s.setBackend(ctx, time.Minute, tags[(next-2)%len(tags)])
		case n < 11:
			s.rotate(ctx)
		case n < 13:
			color := soakColors[s.intn(len(soakColors))]
			s.setFrontend(ctx, time.Minute, "frontend ui.color → "+color, func(values map[string]any) {
				ui, _ := values["ui"].(map[string]any)
				if ui == nil {
					ui = map[string]any{}
					values["ui"] = ui
				}
				ui["color"] = color
			})
		default:
			s.fleetctl(ctx, time.Minute, "rollout", "pause", demo.Backend, "--reason", "soak")
			sleep(ctx, s.between(10*time.Second, 30*time.Second))
			s.fleetctl(ctx, time.Minute, "rollout", "resume", demo.Backend)
		}
	}
}

// waitObserved waits until the backend Module's status is of its current
// spec, so that `fleetctl status` shows where its last change goes.
func (s *soak) waitObserved(ctx context.Context) {
	s.retry(ctx, time.Minute, "backend observed", func() error {
		m := &fleeetv1.Module{}
		if err := s.fleet.Management.Client.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: demo.Backend}, m); err != nil {
			return err
		}
		if m.Status.ObservedGeneration != m.Generation {
			return fmt.Errorf("status of generation %d, spec at %d", m.Status.ObservedGeneration, m.Generation)
		}
		return nil
	})
}

// setBackend sets the backend's tag, trying again while the management
// apiserver or the webhook is down.
func (s *soak) setBackend(ctx context.Context, within time.Duration, tag string) {
	s.changeWith(ctx, within, "backend → "+tag, func() error {
		m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: demo.Backend}}
		return testenv.Change(ctx, s.fleet.Management.Client, m, func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = tag })
	})
}

// rotate issues a new registry password and writes it into the tenant's
// registry Secret on the management cluster, which the frontend Module
// delivers to every cluster. The registry keeps accepting the earlier
// passwords, so a cluster the new one has not reached yet keeps pulling.
func (s *soak) rotate(ctx context.Context) {
	pass := s.fleet.Registry.Rotate(s.t)
	s.mu.Lock()
	s.passwords = append(s.passwords, pass)
	n := len(s.passwords)
	s.mu.Unlock()
	config := s.fleet.Registry.DockerConfigJSON(s.t, pass)
	s.changeWith(ctx, time.Minute, fmt.Sprintf("rotate the registry password (%d)", n), func() error {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: demo.RegistrySecret}}
		return testenv.Change(ctx, s.fleet.Management.Client, secret, func(secret *corev1.Secret) {
			secret.Data[corev1.DockerConfigJsonKey] = config
		})
	})
}

// checkDelivered checks that every Secret the tenant offers for delivery
// is, once the fleet converged, in every cluster's tenant namespace with
// the data it has on the management cluster: the last rotation reached
// every cluster, whatever the faults did to it on the way.
func (s *soak) checkDelivered(ctx context.Context) {
	offered := &corev1.SecretList{}
	if !s.retry(ctx, time.Minute, "list the offered Secrets", func() error {
		return s.fleet.Management.Client.List(ctx, offered, client.InNamespace(demo.Tenant), client.MatchingLabels{fleeetv1.DeliverableLabel: "true"})
	}) {
		return
	}
	for _, name := range demo.Names {
		for _, want := range offered.Items {
			s.retry(ctx, 2*time.Minute, fmt.Sprintf("Secret %s delivered to %s as it is upstream", want.Name, name), func() error {
				have := &corev1.Secret{}
				if err := s.fleet.Downstream[name].Client.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: want.Name}, have); err != nil {
					return err
				}
				if !maps.EqualFunc(have.Data, want.Data, bytes.Equal) {
					return fmt.Errorf("its data differs from the management cluster's") // never the data itself
				}
				return nil
			})
		}
	}
}

// revokeRotatedOut revokes every registry password but the one rotated in
// last, as a platform team does once a rotation reached every cluster, and
// has each cluster pull again (fleetctl retry): each must fetch the
// frontend's chart with the password the fleet delivered last.
func (s *soak) revokeRotatedOut(ctx context.Context) {
	s.mu.Lock()
	rotated := slices.Clone(s.passwords)
	s.mu.Unlock()
	for _, pass := range append([]string{s.fleet.Registry.Password}, rotated[:len(rotated)-1]...) {
		s.fleet.Registry.Revoke(s.t, pass)
	}
	s.logf("change: every registry password but the last revoked")
	for _, name := range demo.Names {
		s.fleetctl(ctx, time.Minute, "retry", name)
	}
	for _, name := range demo.Names {
		s.retry(ctx, 2*time.Minute, name+" pulls the frontend's chart with the password delivered last", func() error {
			remote := &fleeetv1.Remote{}
			if err := s.fleet.Management.Client.Get(ctx, client.ObjectKey{Namespace: demo.Tenant, Name: name}, remote); err != nil {
				return err
			}
			token := remote.Annotations[fleeetv1.RetryAnnotation]
			sources := &sourcev1.OCIRepositoryList{}
			if err := s.fleet.Downstream[name].Client.List(ctx, sources, client.InNamespace(demo.Tenant)); err != nil {
				return err
			}
			if len(sources.Items) == 0 {
				return fmt.Errorf("no OCIRepository")
			}
			for _, src := range sources.Items {
				ready := apimeta.FindStatusCondition(src.Status.Conditions, "Ready")
				switch {
				case src.Status.LastHandledReconcileAt != token:
					return fmt.Errorf("OCIRepository %s has not handled the retry yet", src.Name)
				case ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != src.Generation:
					return fmt.Errorf("OCIRepository %s is not Ready: %v", src.Name, ready)
				}
			}
			return nil
		})
	}
}

// soakColors are the frontend's colours a soak picks from.
var soakColors = []string{"#34577c", "#2b8a3e", "#c92a2a", "#e67700"}

// setFrontend changes the frontend Module's Helm values with edit, trying
// again while the management apiserver or the webhook is down.
func (s *soak) setFrontend(ctx context.Context, within time.Duration, what string, edit func(values map[string]any)) {
	s.changeWith(ctx, within, what, func() error {
		m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: demo.Tenant, Name: demo.Frontend}}
		return testenv.Change(ctx, s.fleet.Management.Client, m, func(m *fleeetv1.Module) {
			values := map[string]any{}
			_ = json.Unmarshal(m.Spec.Sync.Package.Helm.Values.Raw, &values)
			edit(values)
			raw, _ := json.Marshal(values) // decoded JSON: cannot fail
			m.Spec.Sync.Package.Helm.Values = &apiextensionsv1.JSON{Raw: raw}
		})
	})
}

func (s *soak) fleetctl(ctx context.Context, within time.Duration, args ...string) {
	s.changeWith(ctx, within, "fleetctl "+strings.Join(args, " "), func() error {
		out, err := s.fleet.Fleetctl(ctx, args...)
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
}

// changeWith makes a change to the fleet, trying again while it fails
// (retry), and records it.
func (s *soak) changeWith(ctx context.Context, within time.Duration, what string, do func() error) {
	if s.retry(ctx, within, what, do) {
		s.mu.Lock()
		s.changes++
		s.mu.Unlock()
		s.logf("change: %s", what)
	}
}

// retry calls do until it succeeds, every 2 s for within, and reports
// whether it did; failing for that long is a violation.
func (s *soak) retry(ctx context.Context, within time.Duration, what string, do func() error) bool {
	end := time.Now().Add(within)
	for {
		err := do()
		if err == nil {
			return true
		}
		if time.Now().After(end) || !sleep(ctx, 2*time.Second) {
			s.violate("%s: not done within %s: %v", what, within, err)
			return false
		}
	}
}

// watch starts the checks that run all along: plans on the management
// cluster, Remotes' connectivity, and deletions downstream.
func (s *soak) watch(ctx context.Context, wg *sync.WaitGroup) {
	contents := &fleettest.Contents{Reader: s.fleet.Management.Client}
	wg.Go(func() {
		testenv.Follow(ctx, s.fleet.Management, &fleeetv1.ProxyAssemblageList{}, demo.Tenant, func(ev watch.Event) {
			if pa, ok := ev.Object.(*fleeetv1.ProxyAssemblage); ok && ev.Type != watch.Deleted {
				s.seePlan(pa, contents)
			}
		})
	})
	wg.Go(func() {
		testenv.Follow(ctx, s.fleet.Management, &fleeetv1.RemoteList{}, demo.Tenant, func(ev watch.Event) {
			if r, ok := ev.Object.(*fleeetv1.Remote); ok {
				s.mu.Lock()
				s.offline[r.Name] = apimeta.IsStatusConditionFalse(r.Status.Conditions, fleeetv1.ConnectedCondition)
				s.mu.Unlock()
			}
		})
	})
	for _, name := range demo.Names {
		for _, list := range []client.ObjectList{&kustomizev1.KustomizationList{}, &helmv2.HelmReleaseList{}, &appsv1.DeploymentList{}} {
			wg.Go(func() {
				testenv.Follow(ctx, s.fleet.Downstream[name], list, demo.Tenant, func(ev watch.Event) {
					if o, ok := ev.Object.(client.Object); ok && ev.Type == watch.Deleted {
						s.violate("%s: %T %s deleted, which a plan holds", name, o, o.GetName())
					}
				})
			})
		}
	}
	wg.Go(func() {
		for sleep(ctx, 2*time.Second) {
			s.checkVersions()
		}
	})
}

// seePlan records the backend tag a plan holds, and checks that each
// Module's rollout has no more than maxUnavailable (1) online clusters
// unavailable by its doing, and both together no more than the manager's
// --max-moving (1) Remotes: Remotes are counted, not syncs, so one moving
// for both Modules counts once.
func (s *soak) seePlan(pa *fleeetv1.ProxyAssemblage, contents *fleettest.Contents) {
	syncs := contents.Syncs(pa)
	held := compile.Find(syncs, demo.Backend)
	if held == nil || held.Source.Git == nil || held.Source.Git.Tag == "" {
		return // not resolved (the apiserver was away): the next event is
	}
	tag := held.Source.Git.Tag
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[pa.Name] == nil {
		s.held[pa.Name] = map[string]bool{}
	}
	s.held[pa.Name][tag] = true
	s.plansSeen++
	for _, module := range []string{demo.Backend, demo.Frontend} {
		sync := compile.Find(syncs, module)
		if sync == nil {
			continue
		}
		spec, _ := json.Marshal(sync.SyncSpec)
		m := s.moves[move{module, pa.Name}]
		if m == nil {
			m = &moveState{}
			s.moves[move{module, pa.Name}] = m
		}
		if m.held != string(spec) {
			m.costs, m.arrived = m.held != "" && m.ready, false
			m.held = string(spec)
		}
		st := pa.ReportedSync(module)
		m.ready = st != nil && st.State == fleeetv1.SyncReady && (st.Health == nil || st.Health.ReadyPods >= st.Health.DesiredPods)
		m.arrived = m.arrived || m.ready
	}
	byModule := map[string][]string{}
	var all []string // Remotes, not syncs: one moving for two Modules is one move
	for mv, m := range s.moves {
		if m.costs && !m.arrived && !s.offline[mv.remote] {
			byModule[mv.module] = append(byModule[mv.module], mv.remote)
			if !slices.Contains(all, mv.remote) {
				all = append(all, mv.remote)
			}
		}
	}
	for module, moving := range byModule {
		if len(moving) > 1 {
			slices.Sort(moving)
			s.violations = append(s.violations, fmt.Sprintf("+%.0fs %d online clusters made unavailable by %s's rollout at once (maxUnavailable 1): %s",
				time.Since(s.start).Seconds(), len(moving), module, strings.Join(moving, ", ")))
		}
	}
	if len(all) > soakMaxMoving {
		slices.Sort(all)
		s.violations = append(s.violations, fmt.Sprintf("+%.0fs %d Remotes moving at once, all Modules together (the manager's --max-moving %d): %s",
			time.Since(s.start).Seconds(), len(all), soakMaxMoving, strings.Join(all, ", ")))
	}
}

// soakMaxMoving is the manager's --max-moving in a soak: how many Remotes
// all rollouts together may have moving.
const soakMaxMoving = 1

// versionGrace is how long a cluster may run a backend tag before the
// watch of its plan has seen the plan hold it: the agent may read the plan
// before the watch's event arrives.
const versionGrace = 15 * time.Second

// checkVersions checks that every cluster runs a backend tag its plan has
// held at some point.
func (s *soak) checkVersions() {
	for _, name := range demo.Names {
		asm := &fleeetv1.Assemblage{}
		if err := s.fleet.Downstream[name].Client.Get(s.t.Context(), client.ObjectKey{Namespace: demo.Tenant, Name: demo.Tenant}, asm); err != nil {
			continue
		}
		sync := compile.Find(asm.Spec.Syncs, demo.Backend)
		if sync == nil || sync.Source.Git == nil {
			continue
		}
		tag := sync.Source.Git.Tag
		s.mu.Lock()
		s.versionsChecked++
		known := len(s.held[name]) == 0 || s.held[name][tag]
		key := name + "@" + tag
		since, seen := s.unknown[key]
		switch {
		case known:
			delete(s.unknown, key)
		case !seen:
			s.unknown[key] = time.Now()
		}
		s.mu.Unlock()
		if !known && seen && time.Since(since) > versionGrace {
			s.violate("%s runs backend %s, which its plan never held", name, tag)
			s.mu.Lock()
			s.unknown[key] = time.Now().Add(time.Hour) // once
			s.mu.Unlock()
		}
	}
}

// scanSecrets looks for the fleet's secret material — the registry's
// password, the SSH key's body, each cluster's management token — in every
// supervised process's log, every event and the status of every fleeet
// object, upstream and downstream.
func (s *soak) scanSecrets() {
	ctx := s.t.Context()
	secrets := map[string]string{"the registry password": s.fleet.Registry.Password}
	for i, pass := range s.passwords {
		secrets[fmt.Sprintf("rotated registry password %d", i+1)] = pass
	}
	for line := range strings.Lines(string(s.fleet.SSH.Identity)) {
		if line = strings.TrimSpace(line); len(line) > 40 && !strings.HasPrefix(line, "-----") {
			secrets["the SSH key"] = line
			break
		}
	}
	for _, name := range demo.Names {
		stored := &corev1.Secret{}
		if err := s.fleet.Downstream[name].Client.Get(ctx, client.ObjectKey{Namespace: demo.AgentNamespace, Name: demo.Tenant + "-credential"}, stored); err == nil {
			secrets[name+"'s token"] = string(stored.Data[credential.TokenKey])
			secrets[name+"'s recovery key"] = string(stored.Data[recovery.PrivateKeyKey])
		}
	}
	var texts []struct{ where, text string }
	add := func(where string, v any) {
		raw, _ := json.Marshal(v)
		texts = append(texts, struct{ where, text string }{where, string(raw)})
	}
	for _, p := range append(s.procs, &supervised{name: "the demo's manager", p: s.fleet.Manager}) {
		if data, err := os.ReadFile(p.p.LogPath); err == nil {
			texts = append(texts, struct{ where, text string }{p.name + "'s log", string(data)})
		}
	}
	clusters := map[string]*testenv.Cluster{"management": s.fleet.Management}
	for _, name := range demo.Names {
		clusters[name] = s.fleet.Downstream[name]
	}
	for where, c := range clusters {
		for _, list := range []client.ObjectList{&corev1.EventList{}, &fleeetv1.ModuleList{}, &fleeetv1.RemoteList{},
			&fleeetv1.ProxyAssemblageList{}, &fleeetv1.AssemblageList{}, &fleeetv1.UpstreamList{}} {
			if err := c.Client.List(ctx, list); err == nil {
				add(fmt.Sprintf("%s %T", where, list), list)
			}
		}
	}
	for what, secret := range secrets {
		if secret == "" {
			continue
		}
		for _, t := range texts {
			if strings.Contains(t.text, secret) {
				s.violate("%s appears in %s", what, t.where)
			}
		}
	}
}

// rss is the resident memory, in MiB, of each manager replica and agent.
func (s *soak) rss() map[string]float64 {
	out := map[string]float64{}
	for _, p := range s.procs {
		if strings.HasPrefix(p.name, "manager") || strings.HasSuffix(p.name, "/agent") {
			out[p.name] = residentMiB(p.p.Pid())
		}
	}
	return out
}

// residentMiB reads a process's VmRSS; 0 when it cannot.
func residentMiB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		var kb float64
		if _, err := fmt.Sscanf(line, "VmRSS: %f kB", &kb); err == nil {
			return kb / 1024
		}
	}
	return 0
}

// report prints what the soak did and found, and fails the test on any
// violation.
// recoveries counts the Remotes' Recovered events: each is a cluster that
// got a new credential from the recovery endpoint after its token was
// refused.
func (s *soak) recoveries(ctx context.Context) int {
	events := &corev1.EventList{}
	if err := s.fleet.Management.Client.List(ctx, events, client.InNamespace(demo.Tenant)); err != nil {
		s.t.Errorf("listing the tenant's events: %v", err)
	}
	return eventCount(events, func(e corev1.Event) bool { return e.Reason == fleeetv1.ReasonRecovered })
}

func (s *soak) report(converged time.Duration, recoveries int, before, after map[string]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "soak report (seed %d, rerun with -soak.seed=%d -soak.for=%s -soak.every=%s)\n", s.cfg.seed, s.cfg.seed, s.cfg.duration, s.cfg.every)
	total := 0
	for _, kind := range slices.Sorted(maps.Keys(s.faults)) {
		fmt.Fprintf(&b, "  fault %-32s %d\n", kind, s.faults[kind])
		total += s.faults[kind]
	}
	fmt.Fprintf(&b, "  faults in all %d, processes restarted %d, changes %d (registry password rotations %d)\n", total, s.restarts, s.changes, len(s.passwords))
	fmt.Fprintf(&b, "  clusters recovered a refused credential %d times; filled quotas refused %d pod creations\n", recoveries, s.quotaRefused)
	fmt.Fprintf(&b, "  checked %d plan versions and %d cluster versions\n", s.plansSeen, s.versionsChecked)
	fmt.Fprintf(&b, "  converged %.0fs after the last fault (bound %s)\n", converged.Seconds(), soakConverges)
	for _, name := range slices.Sorted(maps.Keys(after)) {
		fmt.Fprintf(&b, "  RSS %-20s %.0f → %.0f MiB\n", name, before[name], after[name])
	}
	fmt.Fprintf(&b, "  violations %d\n", len(s.violations))
	for _, v := range s.violations {
		fmt.Fprintf(&b, "    %s\n", v)
	}
	s.t.Log(b.String())
	if len(s.violations) > 0 {
		s.t.Errorf("the soak found %d violations (seed %d)", len(s.violations), s.cfg.seed)
	}
}

// sleep waits d, or less if ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
