package fleetctl

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/plancontent"
)

// A plan part naming a CompiledPlan is backed up holding every sync whole
// and its stamps in its own annotation: the restored Modules' content gets
// other names, and the compiler names it afresh.
func TestBackupKeepsAPlanNamingACompiledPlanWhole(t *testing.T) {
	g := NewWithT(t)
	app := fleeetv1.NamedSync{Name: "app", SyncSpec: fleeetv1.SyncSpec{Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/app.git", Tag: "v1"}}}}
	db := fleeetv1.NamedSync{Name: "db", SyncSpec: fleeetv1.SyncSpec{Source: fleeetv1.Source{Git: &fleeetv1.GitSource{URL: "https://git.example.com/db.git", Tag: "v2"}},
		Secrets: []fleeetv1.SecretDelivery{{Name: "db-creds"}}}}
	stamps := map[string]fleeetv1.Compiled{"app": {Generation: 3, Revision: "v1"}, "db": {Generation: 1, Revision: "v2"}}
	cp := plancontent.NewPlan("team", []fleeetv1.NamedSync{plancontent.Entry(&app, "app-1")}, stamps)
	s := plancontent.Objects{Syncs: map[string]*fleeetv1.CompiledSync{"app-1": {Sync: app}, "db-1": {Sync: db}}, Plans: map[string]*fleeetv1.CompiledPlan{cp.Name: cp}}
	annotations := map[string]string{fleeetv1.CompiledPlanAnnotation: cp.Name, "team": "blue"}
	pa := &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "edge", Annotations: annotations}}
	pa.Spec.CompiledPlan = cp.Name
	pa.Spec.Assemblage.Syncs = []fleeetv1.NamedSync{plancontent.Entry(&db, "db-1")}

	g.Expect(wholePlan(t.Context(), pa, s)).To(Succeed())
	g.Expect(pa.Spec.CompiledPlan).To(BeEmpty())
	g.Expect(pa.Spec.Assemblage.Syncs).To(Equal([]fleeetv1.NamedSync{app, db}))
	g.Expect(pa.Annotations).NotTo(HaveKey(fleeetv1.CompiledPlanAnnotation))
	g.Expect(pa.Annotations).To(HaveKeyWithValue("team", "blue"))
	g.Expect(pa.CompiledSyncs()).To(Equal(stamps))
	g.Expect(annotations).To(HaveKey(fleeetv1.CompiledPlanAnnotation), "the plan as read is left alone")

	delete(s.Plans, cp.Name)
	pa = &fleeetv1.ProxyAssemblage{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "edge", Annotations: annotations}}
	pa.Spec.CompiledPlan = cp.Name
	g.Expect(wholePlan(t.Context(), pa, s)).To(MatchError(ContainSubstring("reading CompiledPlan " + cp.Name)))
}
