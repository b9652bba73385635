package status

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Field managers of the status writers: each applies only the fields it
// owns, so writers sharing an object's status never overwrite each other.
const (
	// HealthManager owns a pull Remote's mode, heartbeat and Connected and
	// Ready conditions.
	HealthManager = "fleet-manager-remote-health"
	// PushManager owns a push Remote's mode, heartbeat, flux and Connected,
	// Ready, Stalled and FluxCompatible conditions, and a push Remote's
	// ProxyAssemblage status.
	PushManager = "fleet-manager-push"
	// RegistrationManager owns a Remote's Registered condition.
	RegistrationManager = "fleet-manager-registration"
	// VersionsManager owns a Module's status.versionPolicy and its
	// VersionResolved condition.
	VersionsManager = "fleet-manager-versions"
	// AgentManager owns a pull Remote's agent and Kubernetes versions, flux
	// and FluxCompatible condition, and its ProxyAssemblage status.
	AgentManager = "fleet-agent"
)

// Apply writes status, holding only the fields owner owns, to obj's status
// with server-side apply: fields other managers own stay as they are, and
// fields owner applied before and leaves out now are removed. Conditions
// are merged by type. An object deleted meanwhile is not an error.
func Apply(ctx context.Context, c client.Client, obj client.Object, owner string, status any) error {
	return apply(ctx, c, obj, owner, status, map[string]any{})
}

// ApplyNewer is Apply of status, with the fields optional left out of it
// when the object's schema does not declare them: the fields a writer
// newer than the CRDs installed (an agent upgraded before its manager)
// announces, which server-side apply would refuse the whole status for.
// What the schema declares is written either way.
func ApplyNewer(ctx context.Context, c client.Client, obj client.Object, owner string, status map[string]any, optional ...string) error {
	err := Apply(ctx, c, obj, owner, status)
	for _, field := range optional {
		if err == nil || !strings.Contains(err.Error(), ".status."+field+": field not declared in schema") {
			continue
		}
		status = maps.Clone(status)
		delete(status, field)
		err = Apply(ctx, c, obj, owner, status)
	}
	return err
}

// ApplyOver is Apply on the version of obj as read: when the object
// changed since, it fails with a conflict, so a status worked out from a
// stale read never replaces a newer one.
func ApplyOver(ctx context.Context, c client.Client, obj client.Object, owner string, status any) error {
	return apply(ctx, c, obj, owner, status, map[string]any{"resourceVersion": obj.GetResourceVersion()})
}

func apply(ctx context.Context, c client.Client, obj client.Object, owner string, status any, meta map[string]any) error {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return err
	}
	meta["name"], meta["namespace"] = obj.GetName(), obj.GetNamespace()
	patch, err := json.Marshal(map[string]any{
		"apiVersion": gvk.GroupVersion().String(),
		"kind":       gvk.Kind,
		"metadata":   meta,
		"status":     status,
	})
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(c.Status().Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, patch),
		client.FieldOwner(owner), client.ForceOwnership))
}

// Conditions returns the conditions of the given types, the ones a writer
// owns, for Apply.
func Conditions(conds []metav1.Condition, types ...string) []metav1.Condition {
	var owned []metav1.Condition
	for _, c := range conds {
		if slices.Contains(types, c.Type) {
			owned = append(owned, c)
		}
	}
	return owned
}
