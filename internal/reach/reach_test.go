package reach_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleeet-dev/fleeet/internal/reach"
)

// The apiserver away, or too busy to answer, is an outage; its refusals
// and a caller giving up are not.
func TestAnOutageIsTheApiserverAwayNotARefusal(t *testing.T) {
	g := NewWithT(t)
	lease := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	for err, away := range map[error]bool{
		&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}: true,
		fmt.Errorf("renewing: %w", context.DeadlineExceeded):            true,
		apierrors.NewServiceUnavailable("etcd is away"):                 true,
		apierrors.NewTimeoutError("storage stalled", 1):                 true,
		apierrors.NewServerTimeout(lease, "update", 1):                  true,
		apierrors.NewTooManyRequests("slow down", 1):                    true,
		apierrors.NewForbidden(lease, "l", errors.New("no")):            false,
		apierrors.NewConflict(lease, "l", errors.New("changed")):        false,
		apierrors.NewNotFound(lease, "l"):                               false,
		context.Canceled:                                                false,
	} {
		g.Expect(reach.Unreachable(err)).To(Equal(away), "%v", err)
	}
	g.Expect(reach.Unreachable(nil)).To(BeFalse())
}

// Outages keep the latest outage seen, whatever order they are observed in.
func TestOutagesRememberTheLatest(t *testing.T) {
	g := NewWithT(t)
	var o reach.Outages
	g.Expect(o.Last().IsZero()).To(BeTrue())
	at := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	away := apierrors.NewServiceUnavailable("away")
	o.Observe(away, at)
	o.Observe(away, at.Add(-time.Minute))
	o.Observe(apierrors.NewBadRequest("refused"), at.Add(time.Minute))
	g.Expect(o.Last()).To(BeTemporally("==", at))
	var none *reach.Outages
	none.Observe(away, at)
	g.Expect(none.Last().IsZero()).To(BeTrue())
}
