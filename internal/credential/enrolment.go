package credential

import (
	"encoding/base64"
	"encoding/json"
)

const (
	// EnrolmentPrefix starts every enrolment string. The number is the
	// version of the format after it, so a later format can be told apart
	// from this one (and from a bare bearer token, which has no dot before
	// its first one).
	EnrolmentPrefix = "fleeet1."

	// EnrolmentKey is the key of the enrolment string in a
	// RegistrationToken's Secret, for `helm install fleet-agent --set
	// token=…`.
	EnrolmentKey = "enrolment"
)

// Enrolment renders the values as the one string that enrols a cluster:
// EnrolmentPrefix, then the values as JSON in standard base64, which the
// fleet-agent chart decodes itself. It carries the management API's URL,
// the CA bundle that signs it (so the agent trusts that CA and no other:
// nothing is trusted on first use), the tenant namespace and the bearer
// token, so it is exactly as secret as the token.
func (v AgentValues) Enrolment() (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return EnrolmentPrefix + base64.StdEncoding.EncodeToString(data), nil
}
