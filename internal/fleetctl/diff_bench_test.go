package fleetctl_test

import (
	"testing"
	"time"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
	"github.com/fleeet-dev/fleeet/internal/fleetctl"
	"github.com/fleeet-dev/fleeet/internal/testenv/fleetviewtest"
)

// BenchmarkDiff times fleetctl diff of a version bump of a Module that
// selects 1,000 Remotes, against the test apiserver with the manager
// running (so every Remote has its compiled plan), in-process.
func BenchmarkDiff(b *testing.B) {
	ns := fleetviewtest.BenchFleet(b, cluster, fleetviewtest.BenchRemotes, 1)
	file := manifest(b, ns, "module-00", func(m *fleeetv1.Module) { m.Spec.Sync.Source.Git.Tag = "v1.1.0" })
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		out, err := run(b, ns, "diff", "-o", "json", "-f", file)
		if err == nil || fleetctl.ExitCode(err) != 1 {
			b.Fatalf("%v\n%s", err, out)
		}
		b.ReportMetric(time.Since(start).Seconds(), "diff-s")
	}
}
