package testenv

import (
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Kubeconfig serialises a one-context kubeconfig for cluster and user, as a
// push Remote's Secret or a process's KUBECONFIG holds it.
func Kubeconfig(t TB, cluster clientcmdapi.Cluster, user clientcmdapi.AuthInfo) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["target"] = &cluster
	cfg.AuthInfos["user"] = &user
	cfg.Contexts["target"] = &clientcmdapi.Context{Cluster: "target", AuthInfo: "user"}
	cfg.CurrentContext = "target"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
