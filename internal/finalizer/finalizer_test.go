package finalizer_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/fleeet-dev/fleeet/internal/finalizer"
)

const (
	ours   = "fleeet.dev/ours"
	theirs = "example.com/theirs"
)

// counting builds a fake client holding objs whose Patch calls are counted
// and fail with patchErr when it is set.
func counting(patches *int, patchErr error, objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			*patches++
			if patchErr != nil {
				return patchErr
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}).Build()
}

func configMap(finalizers ...string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "cm", Finalizers: finalizers}}
}

func stored(g *WithT, c client.Client) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "cm"}, cm)).To(Succeed())
	return cm
}

func TestAddWritesTheFinalizerOnceAndOnlyWhenMissing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	patches := 0
	c := counting(&patches, nil, configMap(theirs))
	cm := stored(g, c)

	g.Expect(finalizer.Add(ctx, c, cm, ours)).To(Succeed())
	g.Expect(patches).To(Equal(1))
	g.Expect(stored(g, c).Finalizers).To(ConsistOf(theirs, ours))

	g.Expect(finalizer.Add(ctx, c, cm, ours)).To(Succeed())
	g.Expect(finalizer.Add(ctx, c, stored(g, c), ours)).To(Succeed())
	g.Expect(patches).To(Equal(1), "a finalizer already there is not written again")
	g.Expect(stored(g, c).Finalizers).To(ConsistOf(theirs, ours))
}

// A controller holding a copy that another writer has since changed still
// gets its finalizer on, and the other writer's change survives: the patch
// is locked on the copy's version, so it conflicts, and is made again on
// the object read afresh.
func TestAddSucceedsOnAStaleCopyWithoutUndoingAnotherWriter(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	patches := 0
	c := counting(&patches, nil, configMap())
	stale := stored(g, c)

	other := stored(g, c)
	other.Labels = map[string]string{"written": "meanwhile"}
	other.Finalizers = []string{theirs}
	g.Expect(c.Update(ctx, other)).To(Succeed())

	g.Expect(finalizer.Add(ctx, c, stale, ours)).To(Succeed())
	got := stored(g, c)
	g.Expect(got.Finalizers).To(ConsistOf(theirs, ours), "the finalizer added meanwhile stays")
	g.Expect(got.Labels).To(HaveKeyWithValue("written", "meanwhile"))
	g.Expect(patches).To(Equal(2), "one conflict, then the write")
}

// Releasing from a stale copy keeps a finalizer another writer added since.
func TestReleaseFromAStaleCopyKeepsAFinalizerAddedMeanwhile(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	patches := 0
	c := counting(&patches, nil, configMap(ours))
	stale := stored(g, c)

	other := stored(g, c)
	other.Finalizers = append(other.Finalizers, theirs)
	g.Expect(c.Update(ctx, other)).To(Succeed())

	g.Expect(finalizer.Release(ctx, c, stale, ours)).To(Succeed())
	g.Expect(stored(g, c).Finalizers).To(Equal([]string{theirs}))
}

func TestAddReportsAFailedWriteNamingTheFinalizer(t *testing.T) {
	g := NewWithT(t)
	patches := 0
	boom := errors.New("apiserver unavailable")
	c := counting(&patches, boom, configMap())

	err := finalizer.Add(context.Background(), c, configMap(), ours)
	g.Expect(err).To(MatchError(boom), "the cause is wrapped, so callers can classify it")
	g.Expect(err.Error()).To(ContainSubstring(ours))
}

func TestReleaseRemovesOnlyItsOwnFinalizerAndOnlyWhenPresent(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	patches := 0
	c := counting(&patches, nil, configMap(theirs, ours))
	cm := stored(g, c)

	g.Expect(finalizer.Release(ctx, c, cm, ours)).To(Succeed())
	g.Expect(patches).To(Equal(1))
	g.Expect(stored(g, c).Finalizers).To(Equal([]string{theirs}))

	g.Expect(finalizer.Release(ctx, c, cm, ours)).To(Succeed())
	g.Expect(finalizer.Release(ctx, c, stored(g, c), ours)).To(Succeed())
	g.Expect(patches).To(Equal(1), "a finalizer already gone is not written again")
	g.Expect(stored(g, c).Finalizers).To(Equal([]string{theirs}))
}

// Releasing the last finalizer of an object being deleted lets the
// deletion finish; releasing it again, on the copy that is now gone, is
// not an error, but any other failure is.
func TestReleaseLetsDeletionFinishAndToleratesAnObjectAlreadyGone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	patches := 0
	c := counting(&patches, nil, configMap(ours))
	cm := stored(g, c)
	g.Expect(c.Delete(ctx, cm)).To(Succeed())
	cm = stored(g, c)
	g.Expect(cm.DeletionTimestamp).NotTo(BeNil(), "the finalizer holds the deletion")

	gone := cm.DeepCopy()
	g.Expect(finalizer.Release(ctx, c, cm, ours)).To(Succeed())
	err := c.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the deletion finished: %v", err)

	g.Expect(finalizer.Release(ctx, c, gone, ours)).To(Succeed())
	g.Expect(patches).To(Equal(2), "the second release did try to write")

	boom := errors.New("apiserver unavailable")
	failing := counting(&patches, boom, configMap(ours))
	g.Expect(finalizer.Release(ctx, failing, configMap(ours), ours)).To(MatchError(boom))
}
