package v1alpha1

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CompiledAnnotation on a ProxyAssemblage records, per sync, what the
// compiler made of the Module it comes from, as JSON: sync name → Compiled.
// A plan split over several parts stamps each sync on the part holding it,
// and a Module whose sync is in no part on part 0.
// The Module controller judges its rollout from it instead of compiling
// every Remote again. It is an annotation, not spec, so a new Module
// generation that compiles to the same sync leaves the plan's generation,
// and the cluster's report of it, as they are.
const CompiledAnnotation = "fleeet.dev/compiled"

// ProxyAssemblageSpec is the compiled plan for one Remote.
type ProxyAssemblageSpec struct {
	// Assemblage is what the cluster's Assemblage will hold. Its schema is
	// not repeated in this CRD: every sync was validated where it was
	// written (the Module and BootstrapModule schemas and the admission
	// policies), only the manager may write a plan, and the cluster's
	// Assemblage validates it again. The apiserver's schema processing of
	// the deep sync schema, repeated for every plan of every Remote, was
	// most of the cost of a version change reaching a large fleet.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Assemblage AssemblageSpec `json:"assemblage,omitempty"`

	// CompiledPlan names the CompiledPlan in the plan's namespace holding
	// the rest of this part's entries: a reader takes the part's syncs to
	// be Assemblage.Syncs and the CompiledPlan's entries together, sorted
	// by name. Written only for a cluster whose agent reads CompiledPlans
	// (RemoteStatus.ReadsCompiledPlans) and for push Remotes.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CompiledPlan string `json:"compiledPlan,omitempty"`
}

// ProxyAssemblage is the whole plan for one Remote (same name), compiled by
// the manager from every Module selecting it. Its spec is written only by the
// manager; its status by the agent of that cluster (pull) or by the manager
// (push).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pasm;pasms,categories=fleeet
// +kubebuilder:printcolumn:name="Syncs",type=integer,JSONPath=`.status.summary.total`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.summary.ready`
// +kubebuilder:printcolumn:name="Blocked",type=integer,JSONPath=`.status.summary.blocked`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.summary.failed`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProxyAssemblage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the compiled plan.
	Spec ProxyAssemblageSpec `json:"spec,omitempty"`

	// Status is the downstream Assemblage's status, copied upstream whole by
	// one writer: the cluster's agent (field manager fleet-agent) for a pull
	// Remote, the manager's push controller (fleet-manager-push) for a push
	// Remote.
	// +kubebuilder:default={"observedGeneration":-1}
	Status AssemblageStatus `json:"status,omitempty"`
}

// ProxyAssemblageList is a list of ProxyAssemblages.
//
// +kubebuilder:object:root=true
type ProxyAssemblageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxyAssemblage `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ProxyAssemblage{}, &ProxyAssemblageList{})
}

// Compiled is the compiler's stamp on one Module's sync in a plan.
type Compiled struct {
	// Generation of the Module the sync was last compiled from.
	Generation int64 `json:"generation"`
	// Revision the plan was compiled towards: the Module's, or the one its
	// rollback returns to.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Pending: the plan holds something other than what that generation
	// compiles to, because the rollout has not admitted the Remote yet, the
	// Module is suspended, its bindings could not be resolved, the plan
	// has no room for it (TooLarge), or admission policy refused the
	// CompiledSync storing it (an event says so, PolicyDenied).
	Pending bool `json:"pending,omitempty"`
	// BindingError says why the bindings could not be resolved.
	BindingError string `json:"bindingError,omitempty"`
	// TooLarge says why the sync that generation compiles to was left out
	// of the plan: with it, the plan would pass the manager's
	// --max-plan-bytes. The Remote keeps what it held of the Module.
	TooLarge string `json:"tooLarge,omitempty"`
}

// compiledFields is Compiled with its own JSON encoding, to encode and
// decode the long form.
type compiledFields Compiled

// MarshalJSON writes the common stamp, a generation and revision alone, as
// the string "<generation>/<revision>", and any other as an object: the
// annotation is rewritten with every plan, and the short form halves it.
func (c Compiled) MarshalJSON() ([]byte, error) {
	if !c.Pending && c.BindingError == "" && c.TooLarge == "" && !strings.Contains(c.Revision, "/") {
		return json.Marshal(strconv.FormatInt(c.Generation, 10) + "/" + c.Revision)
	}
	return json.Marshal(compiledFields(c))
}

// UnmarshalJSON reads either form MarshalJSON writes.
func (c *Compiled) UnmarshalJSON(raw []byte) error {
	var short string
	if err := json.Unmarshal(raw, &short); err != nil {
		return json.Unmarshal(raw, (*compiledFields)(c))
	}
	generation, revision, ok := strings.Cut(short, "/")
	g, err := strconv.ParseInt(generation, 10, 64)
	if !ok || err != nil {
		return fmt.Errorf("compiled stamp %q is not <generation>/<revision>", short)
	}
	*c = Compiled{Generation: g, Revision: revision}
	return nil
}

// CompiledSyncs reads the plan's CompiledAnnotation; a plan without one, or
// with one the manager did not write, has no stamps.
func (pa *ProxyAssemblage) CompiledSyncs() map[string]Compiled {
	var stamps map[string]Compiled
	if err := json.Unmarshal([]byte(pa.Annotations[CompiledAnnotation]), &stamps); err != nil {
		return nil
	}
	return stamps
}

// ReportedSync is what the cluster reported for the named sync of the plan as
// it stands; nil when the cluster has not reported this generation yet (an
// older report describes a plan that is gone) or the sync is not in it.
func (pa *ProxyAssemblage) ReportedSync(name string) *SyncStatus {
	if pa.Status.ObservedGeneration != pa.Generation {
		return nil
	}
	for i := range pa.Status.Syncs {
		if pa.Status.Syncs[i].Name == name {
			return &pa.Status.Syncs[i]
		}
	}
	return nil
}
