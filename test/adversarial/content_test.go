package adversarial_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// contentAttacks go after the CompiledSyncs plans name (NamedSync.Content):
// a tenant who could write one would change what every cluster whose plan
// names it deploys, one who could delete one would leave those clusters
// unable to read their plans, and a cluster that could list them, or work
// out their names, would read content its plan does not name (another
// variant of a Module's overrides). The content attacked is written the way
// the manager writes it, with the manager's own token.
func contentAttacks(ctx context.Context, f *fleet, alice, cluster, manager client.Client, aliceID, clusterID, managerID string) []attack {
	admin := f.mgmt.Client
	// owner stands for a Module of team-a: content is named with a hash
	// keyed with its UID, which only those who may read Modules learn.
	owner := &metav1.ObjectMeta{Namespace: tenantA, Name: "content", UID: uuid.NewUUID()}
	sync := func(name string) *fleeetv1.NamedSync {
		m := module(tenantA, name, nil)
		return &fleeetv1.NamedSync{Name: name, SyncSpec: m.Spec.Sync}
	}
	// written is the CompiledSync holding the sync name, as the manager
	// stores it, created unless it is there.
	written := func(g Gomega, name string) *fleeetv1.CompiledSync {
		s := sync(name)
		cs := plancontent.New(owner, plancontent.Name(owner, s), s)
		g.Expect(client.IgnoreAlreadyExists(manager.Create(ctx, cs.DeepCopy()))).To(Succeed())
		return cs
	}
	// intact asserts cs still holds the sync it was written with.
	intact := func(g Gomega, cs *fleeetv1.CompiledSync) {
		stored := &fleeetv1.CompiledSync{}
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(cs), stored)).To(Succeed())
		g.Expect(stored.Sync).To(Equal(cs.Sync))
	}
	hijack := func(s *fleeetv1.NamedSync) { s.Source.Git.URL = "https://git.evil.example.com/app.git" }
	return []attack{
		{"tenant-creates-content", aliceID, "create a CompiledSync in team-a, to name it from a plan", func(t *testing.T, g Gomega) string {
			s := sync("forged")
			return refused(g, alice.Create(ctx, plancontent.New(owner, plancontent.Name(owner, s), s)), "compiled by the fleet manager only")
		}},
		{"tenant-updates-content", aliceID, "update a CompiledSync the manager wrote to fetch another repository", func(t *testing.T, g Gomega) string {
			cs := written(g, "update")
			var msg string
			// The manager's collector marks new content once; an update
			// racing with that is a conflict, and is sent again.
			g.Eventually(func(g Gomega) {
				stored := &fleeetv1.CompiledSync{}
				g.Expect(alice.Get(ctx, client.ObjectKeyFromObject(cs), stored)).To(Succeed())
				hijack(&stored.Sync)
				err := alice.Update(ctx, stored)
				g.Expect(apierrors.IsConflict(err)).To(BeFalse(), "raced with the manager: %v", err)
				msg = refused(g, err, "compiled by the fleet manager only", "is immutable")
			}).Should(Succeed())
			intact(g, cs)
			return msg
		}},
		{"tenant-patches-content", aliceID, "merge-patch a CompiledSync the manager wrote to fetch another repository", func(t *testing.T, g Gomega) string {
			cs := written(g, "patch")
			msg := refused(g, testenv.Change(ctx, alice, cs.DeepCopy(), func(cs *fleeetv1.CompiledSync) { hijack(&cs.Sync) }),
				"compiled by the fleet manager only", "is immutable")
			intact(g, cs)
			return msg
		}},
		{"tenant-hastens-collection", aliceID, "annotate a CompiledSync the manager wrote unreferenced since 1970, to have it collected under the clusters naming it", func(t *testing.T, g Gomega) string {
			cs := written(g, "collect")
			msg := refused(g, testenv.Change(ctx, alice, cs.DeepCopy(), func(cs *fleeetv1.CompiledSync) {
				metav1.SetMetaDataAnnotation(&cs.ObjectMeta, fleeetv1.UnreferencedAnnotation, "1970-01-01T00:00:00Z")
			}), "compiled by the fleet manager only")
			stored := &fleeetv1.CompiledSync{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(cs), stored)).To(Succeed())
			g.Expect(stored.Annotations).NotTo(HaveKeyWithValue(fleeetv1.UnreferencedAnnotation, "1970-01-01T00:00:00Z"))
			return msg
		}},
		{"tenant-deletes-content", aliceID, "delete a CompiledSync the manager wrote (every plan naming it would break)", func(t *testing.T, g Gomega) string {
			cs := written(g, "delete")
			msg := refused(g, alice.Delete(ctx, cs.DeepCopy()), "deleted by the fleet manager only")
			intact(g, cs)
			return msg
		}},
		{"cluster-lists-content", clusterID, "list CompiledSyncs in team-a, to read content its plan does not name", func(t *testing.T, g Gomega) string {
			written(g, "listed")
			return refusedByRBAC(g, cluster.List(ctx, &fleeetv1.CompiledSyncList{}, client.InNamespace(tenantA)))
		}},
		{"cluster-watches-content", clusterID, "watch CompiledSyncs in team-a", func(t *testing.T, g Gomega) string {
			cfg := rest.AnonymousClientConfig(f.mgmt.Config)
			cfg.BearerToken = mint(t, f.mgmt, tenantA, fleeetv1.RemoteIdentityName("edge"))
			watcher, err := client.NewWithWatch(cfg, client.Options{Scheme: admin.Scheme()})
			g.Expect(err).NotTo(HaveOccurred())
			w, err := watcher.Watch(ctx, &fleeetv1.CompiledSyncList{}, client.InNamespace(tenantA))
			if err == nil {
				w.Stop()
			}
			return refusedByRBAC(g, err)
		}},
		{"cluster-creates-content", clusterID, "create a CompiledSync in team-a, to name it in a report", func(t *testing.T, g Gomega) string {
			s := sync("planted")
			return refusedByRBAC(g, cluster.Create(ctx, plancontent.New(owner, plancontent.Name(owner, s), s)))
		}},
		{"cluster-guesses-a-content-name", clusterID, "get a CompiledSync named <module>- and the first 20 hex digits of the sha256 of the sync's JSON, with no key", func(t *testing.T, g Gomega) string {
			cs := written(g, "guessed")
			g.Expect(cluster.Get(ctx, client.ObjectKeyFromObject(cs), &fleeetv1.CompiledSync{})).To(Succeed(),
				"a cluster gets content by its name; only the name is hidden")
			raw, err := json.Marshal(&cs.Sync)
			g.Expect(err).NotTo(HaveOccurred())
			sum := sha256.Sum256(raw)
			guess := owner.Name + "-" + hex.EncodeToString(sum[:])[:20]
			err = cluster.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: guess}, &fleeetv1.CompiledSync{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "guessing %s: %v", guess, err)
			return fmt.Sprintf("%s: %v (the name is keyed with the Module's UID)", guess, err)
		}},
		{"cluster-reads-another-tenants-content", clusterID, "get a CompiledSync in team-b", func(t *testing.T, g Gomega) string {
			return refusedByRBAC(g, cluster.Get(ctx, client.ObjectKey{Namespace: tenantB, Name: "content-0123456789abcdef0123"}, &fleeetv1.CompiledSync{}))
		}},
		{"manager-rewrites-content", managerID, "merge-patch the sync of a CompiledSync (the manager may patch, to mark content unreferenced); and ask the webhook about an update", func(t *testing.T, g Gomega) string {
			cs := written(g, "rewrite")
			msg := refused(g, testenv.Change(ctx, manager, cs.DeepCopy(), func(cs *fleeetv1.CompiledSync) { hijack(&cs.Sync) }), "is immutable")
			intact(g, cs)
			// RBAC gives the manager no update; were it granted, the
			// webhook would refuse the update the same way.
			changed := cs.DeepCopy()
			hijack(&changed.Sync)
			code, rev, err := review(f, contentUpdate(g, "system:serviceaccount:"+managerNamespace+":fleet-manager", cs, changed))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rev.Response).NotTo(BeNil())
			g.Expect(rev.Response.Allowed).To(BeFalse())
			g.Expect(rev.Response.Result.Message).To(ContainSubstring("is immutable"))
			return fmt.Sprintf("%s; an update reviewed directly: HTTP %d, allowed=false", msg, code)
		}},
	}
}

// contentUpdate is an AdmissionReview of user updating the CompiledSync
// old to changed.
func contentUpdate(g Gomega, username string, old, changed *fleeetv1.CompiledSync) []byte {
	encode := func(cs *fleeetv1.CompiledSync) []byte {
		cs = cs.DeepCopy()
		cs.APIVersion, cs.Kind = fleeetv1.GroupVersion.String(), "CompiledSync"
		raw, err := json.Marshal(cs)
		g.Expect(err).NotTo(HaveOccurred())
		return raw
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "content-update-1",
			Kind:      metav1.GroupVersionKind{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Kind: "CompiledSync"},
			Resource:  metav1.GroupVersionResource{Group: fleeetv1.GroupVersion.Group, Version: fleeetv1.GroupVersion.Version, Resource: "compiledsyncs"},
			Namespace: old.Namespace, Name: old.Name, Operation: admissionv1.Update,
			UserInfo:  authenticationv1.UserInfo{Username: username, Groups: []string{"system:serviceaccounts", "system:authenticated"}},
			Object:    runtime.RawExtension{Raw: encode(changed)},
			OldObject: runtime.RawExtension{Raw: encode(old)},
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	return body
}
