// Package manager wires the fleet-manager's controllers into a
// controller-runtime manager, for the binary and for tests alike.
package manager

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fleeet-dev/fleeet/internal/controllers/bootstrap"
	"github.com/fleeet-dev/fleeet/internal/controllers/module"
	"github.com/fleeet-dev/fleeet/internal/controllers/registration"
	"github.com/fleeet-dev/fleeet/internal/controllers/remote"
	"github.com/fleeet-dev/fleeet/internal/enrol"
	"github.com/fleeet-dev/fleeet/internal/webhooks"
)

// Name is the fleet-manager's name as a field manager, event source and
// leader election identity.
const Name = "fleet-manager"

// Options configure the fleet-manager's controllers.
type Options struct {
	// OfflineGrace is how long after its last heartbeat a pull Remote is
	// marked Offline.
	OfflineGrace time.Duration
	// PushTimeout bounds each request to a push Remote's cluster.
	PushTimeout time.Duration
	// PushPoll is how often a push Remote's status is read while it progresses.
	PushPoll time.Duration
	// Concurrent is how many objects each controller reconciles at once.
	Concurrent int
	// Management is the API URL and CA bundle agents connect to, written
	// into each RegistrationToken's agent values.
	Management enrol.Management
}

// Setup registers every fleet-manager controller with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	compiler := &remote.Compiler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(Name), Concurrent: o.Concurrent}
	if err := compiler.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := (&remote.Health{Client: mgr.GetClient(), Grace: o.OfflineGrace, Concurrent: o.Concurrent}).SetupWithManager(mgr); err != nil {
		return err
	}
	push := &remote.Push{Client: mgr.GetClient(), Timeout: o.PushTimeout, Poll: o.PushPoll, Concurrent: o.Concurrent}
	if err := push.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := (&bootstrap.Reconciler{Client: mgr.GetClient(), FieldOwner: Name, Concurrent: o.Concurrent}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&module.Reconciler{Client: mgr.GetClient(), Concurrent: o.Concurrent}).SetupWithManager(mgr); err != nil {
		return err
	}
	tokens := &registration.Tokens{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(Name), Management: o.Management, Concurrent: o.Concurrent}
	if err := tokens.SetupWithManager(mgr); err != nil {
		return err
	}
	remotes := &registration.Remotes{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(Name), Concurrent: o.Concurrent}
	if err := remotes.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	mgr.GetWebhookServer().Register(webhooks.RegistrationPath, &admission.Webhook{
		Handler: &webhooks.Registrations{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient()},
	})
	return nil
}
