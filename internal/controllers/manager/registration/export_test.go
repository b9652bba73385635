package registration

// The pure rules behind the controllers, for the table tests of
// package registration_test.
var (
	Refusal           = refusal
	RegistrationRules = registrationRules
	Create            = create
)
