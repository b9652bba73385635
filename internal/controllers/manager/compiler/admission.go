package compiler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fleeetv1 "github.com/fleeet-dev/fleeet/api/v1alpha1"
)

// Judge decides a write as the admission webhook would, by the same
// policies and with the same messages (webhooks.Policies.Judge): the
// response, or an error when no decision could be reached.
type Judge interface {
	Judge(ctx context.Context, req admission.Request) (admission.Response, error)
}

// refusal is an admission policy's refusal of a write: one the compiler
// judged in process, or a CompiledSync's create the webhook refused a
// moment ago, remembered for the next Remotes naming it.
type refusal struct{ message string }

func (r *refusal) Error() string { return "admission policy denied the request: " + r.message }

// policyDenial returns the message of an admission policy's refusal:
// judged in process, or the admission webhook's.
func policyDenial(err error) (string, bool) {
	if r := (*refusal)(nil); errors.As(err, &r) {
		return r.message, true
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return "", false
	}
	_, msg, denied := strings.Cut(status.Status().Message, " denied the request: ")
	return msg, denied
}

// judgeWrite judges, with Judge, the write of pa over old (nil when pa is
// created) as the apiserver would ask the webhook to: the same request,
// from the manager's own user. It returns a *refusal when the policies
// refuse it, and does nothing without a Judge. The webhook's
// matchConditions spare the apiserver the call for the manager's plan
// writes whose every entry names a CompiledSync (the chart's webhook.yaml),
// and the webhook judges every other: the user policies see each plan
// write either way, at one admission round trip fewer per Remote.
func (c *Reconciler) judgeWrite(ctx context.Context, pa, old *fleeetv1.ProxyAssemblage) error {
	if c.Judge == nil {
		return nil
	}
	req, err := c.writeRequest(pa, old)
	if err != nil {
		return err
	}
	resp, err := c.Judge.Judge(ctx, req)
	if err != nil {
		return fmt.Errorf("judging the write by the admission policies: %w", err)
	}
	if len(resp.Warnings) > 0 {
		log.FromContext(ctx).Info("Admission policies warn about the plan", "part", pa.Name, "warnings", resp.Warnings)
	}
	if resp.Allowed {
		return nil
	}
	msg := "refused"
	if resp.Result != nil && resp.Result.Message != "" {
		msg = resp.Result.Message
	}
	return &refusal{message: msg}
}

// writeRequest is the admission request the apiserver would send the
// webhook for the compiler's write of pa over old.
func (c *Reconciler) writeRequest(pa, old *fleeetv1.ProxyAssemblage) (admission.Request, error) {
	gvk := fleeetv1.GroupVersion.WithKind("ProxyAssemblage")
	encode := func(pa *fleeetv1.ProxyAssemblage) (runtime.RawExtension, error) {
		if pa == nil {
			return runtime.RawExtension{}, nil
		}
		typed := *pa // the cache's objects carry no kind
		typed.APIVersion, typed.Kind = gvk.GroupVersion().String(), gvk.Kind
		raw, err := json.Marshal(&typed)
		return runtime.RawExtension{Raw: raw}, err
	}
	object, err := encode(pa)
	if err != nil {
		return admission.Request{}, err
	}
	oldObject, err := encode(old)
	if err != nil {
		return admission.Request{}, err
	}
	operation := admissionv1.Create
	if old != nil {
		operation = admissionv1.Update
	}
	resource := fleeetv1.GroupVersion.WithResource("proxyassemblages")
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Kind:            metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Resource:        metav1.GroupVersionResource{Group: resource.Group, Version: resource.Version, Resource: resource.Resource},
		RequestKind:     &metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		RequestResource: &metav1.GroupVersionResource{Group: resource.Group, Version: resource.Version, Resource: resource.Resource},
		Name:            pa.Name,
		Namespace:       pa.Namespace,
		Operation:       operation,
		UserInfo:        *c.User.DeepCopy(),
		Object:          object,
		OldObject:       oldObject,
	}}, nil
}
