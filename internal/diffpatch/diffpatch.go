// Package diffpatch writes an object as a JSON patch (RFC 6902) of what
// changed since it was read, conditional on the resourceVersion it was read
// at: the same result as an update, without sending what did not change.
// A plan of 50 syncs whose one version changed is one operation of a few
// dozen bytes instead of the whole plan.
package diffpatch

import (
	"encoding/json"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// From is the patch taking read, an object as read from the apiserver, to
// the object the patch is sent with. It fails with a conflict, as an update
// would, when the object changed since read's resourceVersion.
func From(read client.Object) client.Patch { return patch{read} }

type patch struct{ read client.Object }

func (patch) Type() types.PatchType { return types.JSONPatchType }

// Data is the operations taking p.read to obj, after one that sets the
// resourceVersion to read's: the apiserver refuses a patched object whose
// resourceVersion is not the current one.
func (p patch) Data(obj client.Object) ([]byte, error) {
	from, err := json.Marshal(p.read)
	if err != nil {
		return nil, fmt.Errorf("encoding %s as read: %w", p.read.GetName(), err)
	}
	to, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", obj.GetName(), err)
	}
	ops, err := jsonpatch.CreatePatch(from, to)
	if err != nil {
		return nil, fmt.Errorf("comparing %s with what was read: %w", obj.GetName(), err)
	}
	precondition := jsonpatch.NewOperation("replace", "/metadata/resourceVersion", p.read.GetResourceVersion())
	return json.Marshal(append([]jsonpatch.Operation{precondition}, ops...))
}
