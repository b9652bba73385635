// Package webhooks holds the fleet-manager's admission webhook: every write
// to a fleeet.dev object in the management cluster, and every token a
// cluster identity mints for itself, is judged by the Rego policies. Judging
// only reads; nothing a request to the webhook carries is recorded.
package webhooks

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/credential"
	"github.com/fleeet-dev/fleeet/internal/network"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/policy"
	"github.com/fleeet-dev/fleeet/internal/readyexpr"
	"github.com/fleeet-dev/fleeet/internal/rollout/window"
	"github.com/fleeet-dev/fleeet/internal/versions"
)

// Path is where the policy webhook is served.
const Path = "/validate"

var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleeet_admission_requests_total",
		Help: "Admission requests judged by the policy webhook, and plan writes the manager judged in process before making them, by kind, operation and decision (allowed, denied, error).",
	}, []string{"kind", "operation", "decision"})
	evaluation = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fleeet_admission_duration_seconds",
		Help:    "Time to judge one admission request, look-ups and policy evaluation included.",
		Buckets: []float64{.00025, .0005, .001, .002, .003, .004, .005, .0075, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"kind"})
	violations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleeet_policy_violations_total",
		Help: "Deny messages produced, by policy package.",
	}, []string{"policy"})
)

func init() { metrics.Registry.MustRegister(requests, evaluation, violations) }

// otherLabel stands for every label value outside its known set.
const otherLabel = "other"

// knownKinds are the kinds the webhook is registered for (see the chart's
// ValidatingWebhookConfiguration), and knownOperations the admission
// operations. Anyone who reaches the webhook port can send any kind and
// operation, so only these become metric labels: one label value per
// request value would grow the registry without bound.
var (
	knownKinds = map[metav1.GroupKind]bool{
		{Group: fleeetv1.GroupVersion.Group, Kind: "Module"}:            true,
		{Group: fleeetv1.GroupVersion.Group, Kind: "BootstrapModule"}:   true,
		{Group: fleeetv1.GroupVersion.Group, Kind: "Remote"}:            true,
		{Group: fleeetv1.GroupVersion.Group, Kind: "ProxyAssemblage"}:   true,
		{Group: fleeetv1.GroupVersion.Group, Kind: "CompiledSync"}:      true,
		{Group: fleeetv1.GroupVersion.Group, Kind: "CompiledPlan"}:      true,
		{Group: fleeetv1.GroupVersion.Group, Kind: "RegistrationToken"}: true,
		{Group: "authentication.k8s.io", Kind: "TokenRequest"}:          true,
	}
	knownOperations = map[admissionv1.Operation]bool{
		admissionv1.Create: true, admissionv1.Update: true, admissionv1.Delete: true, admissionv1.Connect: true,
	}
)

// kindLabel is req's kind as a metric label, from a bounded set.
func kindLabel(req admission.Request) string {
	if knownKinds[metav1.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}] {
		return req.Kind.Kind
	}
	return otherLabel
}

// operationLabel is req's operation as a metric label, from a bounded set.
func operationLabel(req admission.Request) string {
	if knownOperations[req.Operation] {
		return string(req.Operation)
	}
	return otherLabel
}

// Policies judges admission requests with the policy engine.
type Policies struct {
	// Engine holds the compiled policies.
	Engine *policy.Engine
	// Reader reads namespaces and Remotes, from the cache.
	Reader client.Reader
	// LiveReader reads from the apiserver what the cache has not seen yet
	// (a namespace created a moment before the object being judged) and the
	// Modules a dependency cycle is looked for in.
	LiveReader client.Reader
	// Registrations looks up a registration identity's token and Remotes.
	Registrations *Registrations
	// SourceNetworks is the policy source URLs' hosts are judged by.
	SourceNetworks network.Policy
	// ManagerUsername is the manager's own identity.
	ManagerUsername string
	// MaxPlanBytes bounds a compiled ProxyAssemblage's spec.
	MaxPlanBytes int
	// Timeout bounds one request's look-ups and evaluation.
	Timeout time.Duration
	// Concurrency bounds the requests judged at once; others wait, within
	// Timeout, for a slot.
	Concurrency int
	// MaxObjectNodes bounds the JSON nodes an object may hold outside
	// metadata.managedFields (see nodeLimit); zero means
	// DefaultMaxObjectNodes.
	MaxObjectNodes int
	// NamespaceConcurrency bounds the reviews of one namespace Guard passes
	// on at once; zero means half of GOMAXPROCS, at least one and at most
	// two (defaultNamespaceConcurrency).
	NamespaceConcurrency int
	// NamespaceWait is how long a review waits in Guard for a turn of its
	// namespace before it is refused; zero means DefaultNamespaceWait.
	NamespaceWait time.Duration

	once  sync.Once
	slots chan struct{}
}

// maxObjectNodes is MaxObjectNodes or its default.
func (p *Policies) maxObjectNodes() int { return cmp.Or(p.MaxObjectNodes, DefaultMaxObjectNodes) }

// nodeLimit is how many JSON nodes an object of kind may hold outside
// metadata.managedFields: maxObjectNodes, and MaxPlanBytes more for the
// kinds the manager compiles from Modules it judged, plans and the
// CompiledSyncs and CompiledPlans they name. A node takes at least one
// byte, so no plan the size policy admits is refused for its nodes, nor
// what it names.
func (p *Policies) nodeLimit(kind string) int {
	if kind == "ProxyAssemblage" || kind == "CompiledSync" || kind == "CompiledPlan" {
		return p.maxObjectNodes() + p.MaxPlanBytes
	}
	return p.maxObjectNodes()
}

// Handle implements admission.Handler. It fails closed: a look-up or
// evaluation error denies with a message saying so.
func (p *Policies) Handle(ctx context.Context, req admission.Request) admission.Response {
	resp, err := p.Judge(ctx, req)
	if err != nil {
		resp = admission.Denied(fmt.Sprintf("denied because the admission policies could not be evaluated: %v", err))
	}
	return resp
}

// Judge decides req as Handle does, by the same policies, with the same
// messages and counted in the same metrics, but returns an error where no
// decision could be reached instead of denying. The manager judges its own
// plan writes with it in process, before it makes them: the webhook's
// matchConditions spare the apiserver a call for those (see the chart's
// webhook.yaml), and a look-up that failed is for the compiler to retry,
// not a refusal to tell a Module of.
func (p *Policies) Judge(ctx context.Context, req admission.Request) (admission.Response, error) {
	start := time.Now()
	resp, err := p.judge(ctx, req)
	decision := "allowed"
	switch {
	case err != nil:
		decision = "error"
	case !resp.Allowed:
		decision = "denied"
	}
	kind := kindLabel(req)
	requests.WithLabelValues(kind, operationLabel(req), decision).Inc()
	evaluation.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	return resp, err
}

// judge returns the decision, or an error when none could be reached.
func (p *Policies) judge(ctx context.Context, req admission.Request) (admission.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	// Serve the webhook through Guard: it refuses objects nested deeper
	// than maxDepth or holding too many nodes before anything decodes
	// them. This second look costs a byte scan of each object and keeps
	// Handle, and Judge in process, safe on their own.
	for _, o := range []struct {
		name   string
		raw    []byte
		stored bool
	}{{"object", req.Object.Raw, false}, {"old object", req.OldObject.Raw, true}} {
		b, err := checkObject(o.raw, limits{depth: maxDepth, nodes: p.nodeLimit(req.Kind.Kind)})
		if err != nil {
			return admission.Response{}, fmt.Errorf("reading the %s: %w", o.name, err)
		}
		if b != nil {
			b.stored = o.stored
			return admission.Denied(b.refusal()), nil
		}
	}
	p.once.Do(func() { p.slots = make(chan struct{}, max(1, p.Concurrency)) })
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	case <-ctx.Done():
		return admission.Response{}, fmt.Errorf("too many admission requests in flight: %w", ctx.Err())
	}
	input, err := p.input(ctx, req)
	if err != nil {
		return admission.Response{}, err
	}
	d, err := p.Engine.Evaluate(ctx, input)
	if err != nil {
		return admission.Response{}, err
	}
	warnings := make([]string, 0, len(d.Warn))
	for _, w := range d.Warn {
		warnings = append(warnings, w.Message)
	}
	if len(d.Deny) > 0 {
		msgs := make([]string, 0, len(d.Deny))
		for _, v := range d.Deny {
			violations.WithLabelValues(v.Policy).Inc()
			msgs = append(msgs, v.Message)
		}
		return admission.Denied(strings.Join(msgs, "; ")).WithWarnings(warnings...), nil
	}
	return admission.Allowed("").WithWarnings(warnings...), nil
}

// input builds the document the policies read (see policies/README.md).
// The object and old object are decoded from the request as they are; the
// typed parts around them go through JSON once so policies see JSON shapes.
// A plan's entries that name a CompiledSync (NamedSync.Content) are judged
// as written, a name and the Secrets delivered for it: the sync it names was
// judged once, when its CompiledSync was stored, and resolving it again for
// every Remote's plan made the webhook judge each version change once per
// Remote.
func (p *Policies) input(ctx context.Context, req admission.Request) (map[string]any, error) {
	doc := map[string]any{}
	request := map[string]any{
		"operation":   req.Operation,
		"kind":        req.Kind,
		"resource":    req.Resource,
		"subResource": req.SubResource,
		"namespace":   req.Namespace,
		"name":        req.Name,
		"dryRun":      req.DryRun != nil && *req.DryRun,
		"userInfo":    req.UserInfo,
	}
	doc["request"] = request
	ns, err := p.namespace(ctx, req.Namespace)
	if err != nil {
		return nil, fmt.Errorf("looking up namespace %s: %w", req.Namespace, err)
	}
	doc["namespace"] = map[string]any{"name": ns.Name, "labels": ns.Labels, "annotations": ns.Annotations}
	context := map[string]any{
		"manager": map[string]any{"username": p.ManagerUsername},
		"now":     time.Now().UTC().Format(time.RFC3339),
		"limits": map[string]any{"maxPlanBytes": p.MaxPlanBytes,
			"maxCredentialSeconds": int64(credential.Lifetime / time.Second)},
	}
	if err := p.lookUp(ctx, req, context); err != nil {
		return nil, err
	}
	doc["context"] = context
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	for key, raw := range map[string][]byte{"object": req.Object.Raw, "oldObject": req.OldObject.Raw} {
		var v any
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, fmt.Errorf("decoding %s: %w", key, err)
			}
		}
		out[key] = v
	}
	return out, nil
}

// namespace reads a namespace from the cache, or from the apiserver when the
// cache has not caught up with its creation: `kubectl apply` of a namespace
// and a Module in one file must not be refused for the cache's lag.
func (p *Policies) namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	err := p.Reader.Get(ctx, client.ObjectKey{Name: name}, ns)
	if apierrors.IsNotFound(err) {
		err = p.LiveReader.Get(ctx, client.ObjectKey{Name: name}, ns)
	}
	return ns, err
}

// lookUp adds what the request's identity and kind call for: the
// RegistrationToken, its identity and its Remotes behind a registration
// identity, the Remote behind a cluster identity, the namespace's Modules
// for a Module.
func (p *Policies) lookUp(ctx context.Context, req admission.Request, into map[string]any) error {
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: req.Namespace, Name: name} }
	if token, ok := fleeetv1.RegistrationTokenOfUser(req.UserInfo.Username, req.Namespace); ok {
		if err := p.Registrations.lookUp(ctx, req.Namespace, token, into); err != nil {
			return err
		}
	}
	if name, ok := fleeetv1.RemoteOfUser(req.UserInfo.Username, req.Namespace); ok {
		remote := &fleeetv1.Remote{}
		switch err := p.Reader.Get(ctx, key(name), remote); {
		case err == nil:
			into["remote"] = remote
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("looking up Remote %s: %w", name, err)
		}
	}
	if (req.Kind.Kind == "Module" || req.Kind.Kind == "BootstrapModule") && req.Kind.Group == fleeetv1.GroupVersion.Group &&
		req.SubResource == "" && len(req.Object.Raw) > 0 {
		placed := &struct {
			Spec fleeetv1.SyncPlacement `json:"spec"`
		}{}
		if err := json.Unmarshal(req.Object.Raw, placed); err != nil {
			return fmt.Errorf("decoding the %s: %w", req.Kind.Kind, err)
		}
		into["sourceHosts"] = p.sourceHostProblems(placed.Spec.Sync.Source)
		into["readyExprs"] = readyExprProblems(placed.Spec.Sync.DependsOn)
	}
	if req.Kind.Kind == "ProxyAssemblage" && req.Kind.Group == fleeetv1.GroupVersion.Group && req.SubResource == "" && len(req.Object.Raw) > 0 {
		plan, err := p.planContext(ctx, req)
		if err != nil {
			return err
		}
		into["plan"] = plan
	}
	if req.Kind.Kind == "Module" && req.SubResource == "" && len(req.Object.Raw) > 0 {
		m := &fleeetv1.Module{}
		if err := json.Unmarshal(req.Object.Raw, m); err != nil {
			return fmt.Errorf("decoding the Module: %w", err)
		}
		modules, err := p.dependencyGraph(ctx, req, m)
		if err != nil {
			return err
		}
		into["modules"] = modules
		into["windows"] = windowProblems(m)
		into["versionPolicy"] = versionPolicyProblems(m)
	}
	return nil
}

// planContext is what a rule about a plan part needs beyond the part as
// written: the name of every sync it holds, its own entries and those of
// the CompiledPlan it names (which only the manager writes, once for every
// Remote at the same versions), and the name and labels of the Remote it
// is the plan of. A CompiledPlan that cannot be read, or that does not
// hold bare references to CompiledSyncs, is an error: without the syncs,
// no rule about them can decide.
func (p *Policies) planContext(ctx context.Context, req admission.Request) (map[string]any, error) {
	pa := &fleeetv1.ProxyAssemblage{}
	if err := json.Unmarshal(req.Object.Raw, pa); err != nil {
		return nil, fmt.Errorf("decoding the ProxyAssemblage: %w", err)
	}
	// The compiler writes a CompiledPlan a moment before the plan naming
	// it: the cache may not hold it yet.
	store := plancontent.From(plancontent.Lagging{Cache: p.Reader, Live: p.LiveReader}, req.Namespace)
	entries, err := plancontent.Entries(ctx, pa, store)
	if err != nil {
		return nil, err
	}
	syncs := make([]string, len(entries))
	for i := range entries {
		syncs[i] = entries[i].Name
	}
	plan := map[string]any{"syncs": syncs}
	if owner := metav1.GetControllerOfNoCopy(pa); owner != nil && owner.Kind == "Remote" && owner.APIVersion == fleeetv1.GroupVersion.String() {
		remote := &fleeetv1.Remote{}
		switch err := p.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: owner.Name}, remote, client.UnsafeDisableDeepCopy); {
		case err == nil:
			plan["remote"] = map[string]any{"name": remote.Name, "labels": remote.Labels}
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("looking up Remote %s: %w", owner.Name, err)
		}
	}
	return plan, nil
}

// sourceHostProblems lists, for policies/sources, each source URL whose
// host the manager's source network policy refuses: an address in a
// denied network, a number resolvers read as one, a metadata service's
// name. Flux fetches sources inside the clusters, out of the manager's
// sight, so only what the URL says can be judged here.
func (p *Policies) sourceHostProblems(src fleeetv1.Source) []map[string]string {
	urls := map[string]string{}
	if src.Git != nil {
		urls["spec.sync.source.git.url"] = src.Git.URL
	}
	if src.Helm != nil {
		urls["spec.sync.source.helm.url"] = src.Helm.URL
	}
	if src.OCI != nil {
		urls["spec.sync.source.oci.url"] = src.OCI.URL
	}
	problems := []map[string]string{}
	for field, url := range urls {
		if err := p.SourceNetworks.CheckHost(network.URLHost(url)); err != nil {
			problems = append(problems, map[string]string{"field": field, "error": err.Error()})
		}
	}
	return problems
}

// windowProblems lists, for policies/windows, each field of the Module's
// rollout windows that would keep a window from ever opening. Rego has no
// cron parser, so the handler works this out and the policy decides.
func windowProblems(m *fleeetv1.Module) []window.Problem {
	parsed, problems := window.Parse(m.Spec.Rollout.Windows)
	return append(append([]window.Problem{}, problems...), window.NeverOpen(parsed, time.Now())...)
}

// readyExprProblems lists, for policies/dependencies, each readyExpr of
// a sync's dependsOn that does not compile as the agent compiles it (Rego
// has no CEL): a syntax error, a variable other than dep, a result that is
// not a bool.
func readyExprProblems(deps []fleeetv1.Dependency) []map[string]string {
	problems := []map[string]string{}
	for i, d := range deps {
		if d.ReadyExpr == "" {
			continue
		}
		if _, err := readyexpr.Compile(d.ReadyExpr); err != nil {
			problems = append(problems, map[string]string{"field": fmt.Sprintf("spec.sync.dependsOn[%d].readyExpr", i), "error": err.Error()})
		}
	}
	return problems
}

// versionPolicyProblems lists, for policies/versions, each field of the
// Module's version policy the manager could not act on (versions.Check): a
// constraint that does not parse (Rego has no semver constraints), a
// source whose versions it does not read.
func versionPolicyProblems(m *fleeetv1.Module) []map[string]string {
	problems := []map[string]string{}
	p := m.Spec.VersionPolicy
	if p == nil {
		return problems
	}
	for _, why := range versions.Check(p, m.Spec.Sync.Source) {
		problems = append(problems, map[string]string{"error": why + " (spec.versionPolicy is set)"})
	}
	return problems
}

// dependencyGraph returns, for a Module that depends on others or is
// required by others, the other Modules of its namespace reduced to what a
// cycle check reads: name, labels, dependsOn and requiredBy. A Module with
// neither gets none, so admission cost does not grow with the namespace;
// such a Module can still close a cycle through its labels when another's
// requiredBy selects them, which the agent reports on the sync instead.
func (p *Policies) dependencyGraph(ctx context.Context, req admission.Request, m *fleeetv1.Module) ([]fleeetv1.Module, error) {
	if len(m.Spec.Sync.DependsOn) == 0 && m.Spec.Sync.RequiredBy == nil {
		return nil, nil
	}
	modules := &fleeetv1.ModuleList{}
	// Read live: two Modules written one right after the other must see
	// each other, or a tenant closes a cycle faster than the cache follows.
	if err := p.LiveReader.List(ctx, modules, client.InNamespace(req.Namespace)); err != nil {
		return nil, fmt.Errorf("listing Modules in %s: %w", req.Namespace, err)
	}
	graph := make([]fleeetv1.Module, 0, len(modules.Items))
	for _, o := range modules.Items {
		n := fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Name: o.Name, Labels: o.Labels}}
		n.Spec.Sync.DependsOn, n.Spec.Sync.RequiredBy = o.Spec.Sync.DependsOn, o.Spec.Sync.RequiredBy
		graph = append(graph, n)
	}
	return graph, nil
}
