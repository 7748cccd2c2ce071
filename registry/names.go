package registry

import (
	"fmt"
	"regexp"
	"strings"
)

// The naming rules of registered services and their handlers: the admin
// API refuses to register other names, and the ingress refuses calls of
// other handler names.

// maxNameLen bounds service and handler names.
const maxNameLen = 128

var (
	serviceNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	handlerNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ValidateServiceName checks a service name: [A-Za-z0-9_.-]+, at most 128,
// not only dots (the name is a path segment of the service's URL).
func ValidateServiceName(name string) error {
	if name == "" || len(name) > maxNameLen || !serviceNameRE.MatchString(name) || strings.Trim(name, ".") == "" {
		return fmt.Errorf("service name %q is invalid: want letters, digits, '_', '.' or '-' (1 to %d), not only dots", name, maxNameLen)
	}
	return nil
}

// ValidateHandlerName checks a handler name: a letter or '_', then
// letters, digits or '_', at most 128. The ingress refuses calls of other
// names too, so no handler path segment can be a dot segment, a separator or
// a control character.
func ValidateHandlerName(name string) error {
	if len(name) > maxNameLen || !handlerNameRE.MatchString(name) {
		return fmt.Errorf("handler name %q is invalid: want a letter or '_', then letters, digits or '_' (at most %d)", name, maxNameLen)
	}
	return nil
}
