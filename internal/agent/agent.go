// Package agent wires the fleet-agent's controllers into a controller-runtime
// manager, for the binary and for tests alike.
package agent

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fleeet-dev/fleeet/internal/controllers/assemblage"
)

// Name is the fleet-agent's name as a field manager, event source and leader
// election identity.
const Name = "fleet-agent"

// Options configure the fleet-agent's controllers.
type Options struct {
	// Concurrent is how many Assemblages reconcile at once.
	Concurrent int
}

// Setup registers every fleet-agent controller with mgr.
func Setup(_ context.Context, mgr ctrl.Manager, o Options) error {
	return (&assemblage.Reconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorder(Name),
		FieldOwner:              Name,
		MaxConcurrentReconciles: o.Concurrent,
	}).SetupWithManager(mgr)
}
