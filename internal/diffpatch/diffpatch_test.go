package diffpatch_test

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleeet-dev/fleeet/internal/diffpatch"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// TestAPatchSendsWhatChangedAndFailsOnAConflict: against a real apiserver,
// a patch from the object as read leaves it as an update would, is a few
// dozen bytes where the object is kilobytes, and is refused with a conflict
// once someone else wrote the object since it was read.
func TestAPatchSendsWhatChangedAndFailsOnAConflict(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c := testenv.StartCluster(t, "diffpatch")
	ns := c.Namespace(t, "patch", nil)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plan",
		Annotations: map[string]string{"fleeet.dev/stamp": "1"}}, Data: map[string]string{}}
	for i := range 50 {
		cm.Data[fmt.Sprintf("sync-%02d", i)] = fmt.Sprintf("content-%02d-0123456789abcdef", i)
	}
	g.Expect(c.Client.Create(ctx, cm)).To(Succeed())
	read := cm.DeepCopy()

	cm.Data["sync-17"] = "content-17-fedcba9876543210"
	cm.Annotations["fleeet.dev/stamp"] = "2"
	delete(cm.Data, "sync-03")
	p := diffpatch.From(read)
	data, err := p.Data(cm)
	g.Expect(err).NotTo(HaveOccurred())
	whole, err := client.Merge.Data(cm)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(len(data)).To(BeNumerically("<", len(whole)/5), "the patch %s", data)
	g.Expect(c.Client.Patch(ctx, cm, p)).To(Succeed())

	stored := &corev1.ConfigMap{}
	g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(cm), stored)).To(Succeed())
	g.Expect(stored.Data).To(Equal(cm.Data))
	g.Expect(stored.Annotations).To(HaveKeyWithValue("fleeet.dev/stamp", "2"))
	g.Expect(stored.ResourceVersion).NotTo(Equal(read.ResourceVersion))

	stale := read.DeepCopy()
	stale.Data["sync-20"] = "lost"
	err = c.Client.Patch(ctx, stale, diffpatch.From(read))
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "a patch from an old read: %v", err)
	g.Expect(c.Client.Get(ctx, client.ObjectKeyFromObject(cm), stored)).To(Succeed())
	g.Expect(stored.Data).To(Equal(cm.Data), "the refused patch changed nothing")
}
