// Package v1alpha1 holds the fleeet.dev/v1alpha1 API: the management-cluster
// kinds (Module, BootstrapModule, Remote, ProxyAssemblage, RegistrationToken)
// and the downstream kinds (Upstream, Assemblage), with the sync types they share.
//
// +kubebuilder:object:generate=true
// +groupName=fleeet.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "fleeet.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
