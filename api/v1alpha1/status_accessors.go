package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The accessors below let one status helper (internal/status) finalise the
// status of every kind a reconciler owns whole: its conditions, the
// generation it observed, and the status itself to tell whether it changed.

// GetConditions returns the Module's status conditions.
func (m *Module) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions replaces the Module's status conditions.
func (m *Module) SetConditions(c []metav1.Condition) { m.Status.Conditions = c }

// SetObservedGeneration records the generation the Module's status is about.
func (m *Module) SetObservedGeneration(g int64) { m.Status.ObservedGeneration = g }

// GetStatus returns a pointer to the Module's status.
func (m *Module) GetStatus() any { return &m.Status }

// GetConditions returns the BootstrapModule's status conditions.
func (m *BootstrapModule) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions replaces the BootstrapModule's status conditions.
func (m *BootstrapModule) SetConditions(c []metav1.Condition) { m.Status.Conditions = c }

// SetObservedGeneration records the generation the BootstrapModule's status
// is about.
func (m *BootstrapModule) SetObservedGeneration(g int64) { m.Status.ObservedGeneration = g }

// GetStatus returns a pointer to the BootstrapModule's status.
func (m *BootstrapModule) GetStatus() any { return &m.Status }

// GetConditions returns the Assemblage's status conditions.
func (a *Assemblage) GetConditions() []metav1.Condition { return a.Status.Conditions }

// SetConditions replaces the Assemblage's status conditions.
func (a *Assemblage) SetConditions(c []metav1.Condition) { a.Status.Conditions = c }

// SetObservedGeneration records the generation the Assemblage's status is
// about.
func (a *Assemblage) SetObservedGeneration(g int64) { a.Status.ObservedGeneration = g }

// GetStatus returns a pointer to the Assemblage's status.
func (a *Assemblage) GetStatus() any { return &a.Status }

// GetConditions returns the Upstream's status conditions.
func (u *Upstream) GetConditions() []metav1.Condition { return u.Status.Conditions }

// SetConditions replaces the Upstream's status conditions.
func (u *Upstream) SetConditions(c []metav1.Condition) { u.Status.Conditions = c }

// SetObservedGeneration records the generation the Upstream's status is
// about.
func (u *Upstream) SetObservedGeneration(g int64) { u.Status.ObservedGeneration = g }

// GetStatus returns a pointer to the Upstream's status.
func (u *Upstream) GetStatus() any { return &u.Status }

// GetConditions returns the RegistrationToken's status conditions.
func (t *RegistrationToken) GetConditions() []metav1.Condition { return t.Status.Conditions }

// SetConditions replaces the RegistrationToken's status conditions.
func (t *RegistrationToken) SetConditions(c []metav1.Condition) { t.Status.Conditions = c }

// SetObservedGeneration records the generation the RegistrationToken's
// status is about.
func (t *RegistrationToken) SetObservedGeneration(g int64) { t.Status.ObservedGeneration = g }

// GetStatus returns a pointer to the RegistrationToken's status.
func (t *RegistrationToken) GetStatus() any { return &t.Status }
