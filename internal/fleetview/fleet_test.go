package fleetview

import (
	"testing"

	. "github.com/onsi/gomega"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

func TestACellShowsStateVersionAndWorkloadHealth(t *testing.T) {
	crashing := &fleeetv1.WorkloadHealth{Workloads: 1, ReadyPods: 1, DesiredPods: 3, Reason: "CrashLoopBackOff",
		Message: "Deployment web: pod web-1: container app"}
	cases := []struct {
		cell Cell
		want string
	}{
		{Cell{}, "-"},
		{Cell{State: "pending"}, "pending"},
		{Cell{State: "ready", Version: "v1.0.0", Current: true}, "ready v1.0.0"},
		{Cell{State: "progressing", Version: "v0.9.0"}, "progressing v0.9.0*"},
		{Cell{State: "ready", Version: "v1.0.0", Current: true,
			Health: &fleeetv1.WorkloadHealth{Workloads: 2, ReadyPods: 4, DesiredPods: 4}}, "ready v1.0.0 4/4 pods"},
		{Cell{State: "failed", Version: "1.2.0", Current: true, Health: crashing}, "failed 1.2.0 1/3 pods CrashLoopBackOff"},
		{Cell{State: "ready", Version: "v1.0.0", Current: true, Health: &fleeetv1.WorkloadHealth{}}, "ready v1.0.0 0/0 pods"},
		{Cell{State: "ready", Version: "6.9.2", Current: true, Health: &fleeetv1.WorkloadHealth{Workloads: 1, ReadyPods: 1, DesiredPods: 1},
			Drift: &fleeetv1.SyncDrift{Detected: 2, Corrected: 2}}, "ready 6.9.2 1/1 pods drift 2×"},
		{Cell{State: "ready", Version: "6.9.2", Current: true, Drift: &fleeetv1.SyncDrift{}}, "ready 6.9.2"},
	}
	for _, tc := range cases {
		NewWithT(t).Expect(tc.cell.Text()).To(Equal(tc.want))
	}
	NewWithT(t).Expect(crashing.Summary()).To(Equal("1/3 pods ready: CrashLoopBackOff (Deployment web: pod web-1: container app)"))
	warned := &fleeetv1.SyncDrift{Detected: 1, Drifted: true, Objects: []string{"Deployment/apps/web", "Service/apps/web"}}
	NewWithT(t).Expect(warned.Summary()).To(Equal("drift detected 1×, corrected 0×, drifted now (Deployment/apps/web, Service/apps/web)"))
}
