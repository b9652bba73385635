package status_test

import (
	"os"
	"testing"

	"github.com/fleeet-dev/fleeet/internal/testenv"
)

// cluster is the apiserver every test of the package shares, one namespace
// per test.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithCluster(m, "management", &cluster, nil))
}
