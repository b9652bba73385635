package fleettest

import (
	"context"

	"github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Notes returns the notes of the events of type typ ("" for any) with
// reason about obj, read through c.
func Notes(g gomega.Gomega, c client.Client, obj client.Object, typ, reason string) []string {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	g.ExpectWithOffset(1, err).NotTo(gomega.HaveOccurred())
	list := &eventsv1.EventList{}
	g.ExpectWithOffset(1, c.List(context.Background(), list, client.InNamespace(obj.GetNamespace()))).To(gomega.Succeed())
	var out []string
	for _, e := range list.Items {
		if (typ == "" || e.Type == typ) && e.Regarding.Kind == gvk.Kind && e.Regarding.Name == obj.GetName() && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}
