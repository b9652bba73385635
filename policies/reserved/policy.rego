# Labels and annotations under fleeet.dev/ are set only by the fleet
# manager: tenants and registrants may neither add, change nor remove them.
package fleeet.reserved

import data.fleeet.lib

changed contains [field, k] if {
	some field in ["labels", "annotations"]
	new := object.get(input.object, ["metadata", field], {})
	old := object.get(input, ["oldObject", "metadata", field], {})
	some k in object.keys(new) | object.keys(old)
	lib.reserved_key(k)
	object.get(new, k, null) != object.get(old, k, null)
}

deny contains msg if {
	not lib.manager
	some [field, k] in changed
	msg := sprintf("metadata.%s[%s]: keys under fleeet.dev/ are set only by the fleet manager", [field, k])
}
