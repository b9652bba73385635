package status_test

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/status"
)

// newModule creates a Module in a namespace of the test's own.
func newModule(t *testing.T) *fleeetv1.Module {
	m := &fleeetv1.Module{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace(t, "tenant", nil), Name: "app"},
		Spec: fleeetv1.ModuleSpec{SyncPlacement: fleeetv1.SyncPlacement{Sync: fleeetv1.SyncSpec{
			Source:  fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1.0.0"}},
			Package: fleeetv1.Package{Kustomize: &fleeetv1.KustomizePackage{Path: "./deploy"}},
		}}}}
	NewWithT(t).Expect(cluster.Client.Create(t.Context(), m)).To(Succeed())
	return m
}

// TestAFinishedReconcileWritesItsOutcomeOnce: the status reaches the API
// server only when it changed; observedGeneration follows a known outcome,
// not a failure before it; every failure but a conflict is a Warning event;
// and a status changed meanwhile by another writer is a conflict, never
// overwritten.
func TestAFinishedReconcileWritesItsOutcomeOnce(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	m := newModule(t)
	recorder := events.NewFakeRecorder(10)
	read := func() *fleeetv1.Module {
		got := &fleeetv1.Module{}
		g.Expect(cluster.Client.Get(ctx, client.ObjectKeyFromObject(m), got)).To(Succeed())
		return got
	}
	finish := func(obj *fleeetv1.Module, change func(*fleeetv1.Module), reconcileErr error) error {
		p := status.NewPatcher(cluster.Client, recorder, obj)
		change(obj)
		p.Finish(ctx, &reconcileErr)
		return reconcileErr
	}

	// A failure before the outcome is known: what changed is written, the
	// generation is not observed, and the error is an event.
	failure := errors.New("listing Remotes: connection refused")
	got := read()
	unobserved := got.Status.ObservedGeneration
	err := finish(got, func(m *fleeetv1.Module) { m.Status.Version = "v1.0.0" }, failure)
	g.Expect(err).To(MatchError(failure))
	g.Expect(read().Status.Version).To(Equal("v1.0.0"))
	g.Expect(read().Status.ObservedGeneration).To(Equal(unobserved))
	g.Expect(recorder.Events).To(Receive(And(HavePrefix("Warning "+fleeetv1.ReasonReconcileFailed), ContainSubstring("connection refused"))))

	// A failure after Ready was judged for this generation: the outcome is
	// known, so the generation is observed.
	got = read()
	err = finish(got, func(m *fleeetv1.Module) { status.MarkFailed(m, fleeetv1.ReasonRemoteFailed, "edge failed") }, failure)
	g.Expect(err).To(MatchError(failure))
	g.Expect(read().Status.ObservedGeneration).To(Equal(got.Generation))
	g.Expect(recorder.Events).To(Receive())

	// Success: the status is written.
	got = read()
	g.Expect(finish(got, func(m *fleeetv1.Module) { status.MarkReady(m, fleeetv1.ReasonSucceeded, "all ready") }, nil)).To(Succeed())
	written := read()
	g.Expect(written.Status.ObservedGeneration).To(Equal(written.Generation))
	g.Expect(written.Status.Conditions).To(ContainElement(HaveField("Reason", fleeetv1.ReasonSucceeded)))

	// Nothing changed: nothing is written.
	g.Expect(finish(written.DeepCopy(), func(*fleeetv1.Module) {}, nil)).To(Succeed())
	g.Expect(read().ResourceVersion).To(Equal(written.ResourceVersion))

	// Another writer came first: the write is a conflict, the other
	// writer's status stays, and a conflict is no event.
	stale := read()
	g.Expect(finish(read(), func(m *fleeetv1.Module) { m.Status.Version = "v1.1.0" }, nil)).To(Succeed())
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "fleeet.dev", Resource: "modules"}, m.Name, errors.New("stale"))
	err = finish(stale, func(m *fleeetv1.Module) { m.Status.Version = "v0.9.0" }, conflict)
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("writing status: "), "the status write itself met the conflict")
	g.Expect(read().Status.Version).To(Equal("v1.1.0"))
	g.Expect(recorder.Events).To(BeEmpty())

	// An object deleted meanwhile is not an error.
	g.Expect(cluster.Client.Delete(ctx, m)).To(Succeed())
	g.Expect(finish(stale, func(m *fleeetv1.Module) { m.Status.Version = "v2" }, nil)).To(Succeed())
}

// An event about a change the status records is said once the status is
// written, and not at all when the write conflicts: the reconcile that read
// the stale object decided a change the API server's object already holds,
// or that the next reconcile decides again.
func TestAChangeIsSaidOnceItsStatusIsWritten(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	m := newModule(t)
	recorder := events.NewFakeRecorder(10)
	admit := func(obj *fleeetv1.Module) error {
		var err error
		p := status.NewPatcher(cluster.Client, recorder, obj)
		obj.Status.Rollout = &fleeetv1.RolloutStatus{Admitted: []string{"edge"}}
		p.Eventf(obj, nil, "Normal", fleeetv1.ReasonRemoteAdmitted, "Rollout", "Remote %s moves to %s", "edge", "v1.0.0")
		g.Expect(recorder.Events).To(BeEmpty(), "nothing is said before the status is written")
		p.Finish(ctx, &err)
		return err
	}
	stale := m.DeepCopy()
	g.Expect(admit(m)).To(Succeed())
	g.Expect(recorder.Events).To(Receive(Equal("Normal " + fleeetv1.ReasonRemoteAdmitted + " Remote edge moves to v1.0.0")))
	g.Expect(apierrors.IsConflict(admit(stale))).To(BeTrue())
	g.Expect(recorder.Events).To(BeEmpty(), "a conflicting write says nothing")
}
