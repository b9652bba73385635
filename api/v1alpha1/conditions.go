package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// GetConditions returns the Module's status conditions.
func (m *Module) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions replaces the Module's status conditions.
func (m *Module) SetConditions(c []metav1.Condition) { m.Status.Conditions = c }

// GetConditions returns the BootstrapModule's status conditions.
func (m *BootstrapModule) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions replaces the BootstrapModule's status conditions.
func (m *BootstrapModule) SetConditions(c []metav1.Condition) { m.Status.Conditions = c }

// GetConditions returns the Assemblage's status conditions.
func (a *Assemblage) GetConditions() []metav1.Condition { return a.Status.Conditions }

// SetConditions replaces the Assemblage's status conditions.
func (a *Assemblage) SetConditions(c []metav1.Condition) { a.Status.Conditions = c }
