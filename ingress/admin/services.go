package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/raftgate/raftgate/registry"
	"github.com/raftgate/raftgate/rpc"
)

// maxServiceBody bounds a PUT /services body; a registration is tiny.
const maxServiceBody = 64 << 10

// maxNameLen bounds service and handler names.
const maxNameLen = 128

var (
	serviceNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	handlerNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ServiceView is the JSON form of a registered service.
type ServiceView struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// Handlers is empty when every handler is accepted.
	Handlers []string `json:"handlers"`
	// Kind is service, object or workflow.
	Kind string `json:"kind"`
	// Shared lists the handlers of an object or workflow that do not wait
	// for the key; omitted when none.
	Shared []string `json:"shared,omitempty"`
	// UpdatedAt is RFC 3339, empty when unknown.
	UpdatedAt string `json:"updatedAt,omitempty"`
}

// ServiceList is the JSON form of GET /services.
type ServiceList struct {
	Services []ServiceView `json:"services"`
}

// ServiceRequest is the body of PUT /services/{name}.
type ServiceRequest struct {
	// Name is optional; when given it must equal the path's name.
	Name     string   `json:"name,omitempty"`
	URL      string   `json:"url"`
	Handlers []string `json:"handlers,omitempty"`
	// Kind is service (the default), object or workflow.
	Kind string `json:"kind,omitempty"`
	// Shared lists the handlers of an object or workflow that run
	// alongside the exclusive ones.
	Shared []string `json:"shared,omitempty"`
}

// Service kinds as the admin API spells them.
var kindNames = map[rpc.Service_Kind]string{
	rpc.Service_SERVICE:  "service",
	rpc.Service_OBJECT:   "object",
	rpc.Service_WORKFLOW: "workflow",
}

func parseKind(s string) (rpc.Service_Kind, error) {
	if s == "" {
		return rpc.Service_SERVICE, nil
	}
	for k, name := range kindNames {
		if name == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf(`kind %q is unknown: want "service", "object" or "workflow"`, s)
}

func serviceView(svc *rpc.Service) ServiceView {
	v := ServiceView{Name: svc.GetName(), URL: svc.GetUrl(), Handlers: svc.GetHandlers(), Kind: kindNames[svc.GetKind()], Shared: svc.GetShared()}
	if v.Handlers == nil {
		v.Handlers = []string{}
	}
	if ms := svc.GetUpdatedAtUnixMs(); ms != 0 {
		v.UpdatedAt = formatTime(ms)
	}
	return v
}

func (s *server) listServices(w http.ResponseWriter, r *http.Request) {
	svcs := s.cfg.Registry.List()
	out := ServiceList{Services: make([]ServiceView, 0, len(svcs))}
	for _, svc := range svcs {
		out.Services = append(out.Services, serviceView(svc))
	}
	slices.SortFunc(out.Services, func(a, b ServiceView) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, out)
}

func (s *server) getService(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	svc, ok := s.cfg.Registry.Lookup(name)
	if !ok {
		s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("service %q is not registered", name))
		return
	}
	writeJSON(w, http.StatusOK, serviceView(svc))
}

// putService registers or updates a service: 201 when it was new on this
// node's replica, 200 when it replaced a registration.
func (s *server) putService(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	req, err := decodeServiceRequest(w, r)
	if err != nil {
		status := http.StatusBadRequest
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			status = http.StatusRequestEntityTooLarge
		}
		s.writeError(w, r, status, err.Error())
		return
	}
	svc, err := validateService(name, req)
	if err != nil {
		s.writeError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	svc.UpdatedAtUnixMs = s.cfg.Now().UnixMilli()
	_, existed := s.cfg.Registry.Lookup(name)

	ctx, cancel := s.callContext(r)
	defer cancel()
	if err := s.cfg.Registry.PutService(ctx, svc); err != nil {
		s.writeCallError(w, r, fmt.Sprintf("register service %q", name), err)
		return
	}
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	}
	writeJSON(w, status, serviceView(svc))
}

func (s *server) deleteService(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ctx, cancel := s.callContext(r)
	defer cancel()
	if err := s.cfg.Registry.DeleteService(ctx, name); err != nil {
		if errors.Is(err, rpc.ErrNotFound) {
			s.writeError(w, r, http.StatusNotFound, fmt.Sprintf("service %q is not registered", name))
			return
		}
		s.writeCallError(w, r, fmt.Sprintf("remove service %q", name), err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func decodeServiceRequest(w http.ResponseWriter, r *http.Request) (ServiceRequest, error) {
	var req ServiceRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxServiceBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.EOF) {
			return req, errors.New(`body must be JSON like {"url": "http://host:port", "handlers": ["greet"]}`)
		}
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			return req, fmt.Errorf("body over %d bytes: %w", maxServiceBody, err)
		}
		return req, fmt.Errorf(`body is not a service registration {"url", "handlers"}: %v`, err)
	}
	if dec.More() {
		return req, errors.New("body has data after the JSON object")
	}
	return req, nil
}

// validateService checks a registration and returns it in stored form: the
// URL without trailing slashes (raftgate appends /{service}/{handler}).
func validateService(name string, req ServiceRequest) (*rpc.Service, error) {
	if err := ValidateServiceName(name); err != nil {
		return nil, err
	}
	if req.Name != "" && req.Name != name {
		return nil, fmt.Errorf("body names service %q but the path names %q", req.Name, name)
	}
	base, err := ValidateServiceURL(req.URL)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(req.Handlers))
	for _, h := range req.Handlers {
		if len(h) > maxNameLen || !handlerNameRE.MatchString(h) {
			return nil, fmt.Errorf("handler name %q is invalid: want a letter or _ then letters, digits or _ (at most %d)", h, maxNameLen)
		}
		if seen[h] {
			return nil, fmt.Errorf("handler %q is listed twice", h)
		}
		seen[h] = true
	}
	kind, err := parseKind(req.Kind)
	if err != nil {
		return nil, err
	}
	svc := &rpc.Service{Name: name, Url: base, Handlers: slices.Clone(req.Handlers), Kind: kind, Shared: slices.Clone(req.Shared)}
	if err := registry.CheckKind(svc); err != nil {
		return nil, err
	}
	return svc, nil
}

// ValidateServiceName checks a service name: [A-Za-z0-9_.-]+, at most 128.
func ValidateServiceName(name string) error {
	if name == "" || len(name) > maxNameLen || !serviceNameRE.MatchString(name) {
		return fmt.Errorf("service name %q is invalid: want letters, digits, '_', '.' or '-' (1 to %d)", name, maxNameLen)
	}
	return nil
}

// ValidateServiceURL checks a service's base URL (absolute http or https,
// with a host, no query or fragment) and returns it without trailing slashes.
func ValidateServiceURL(raw string) (string, error) {
	if raw == "" {
		return "", errors.New(`"url" is required: the service's base URL, like http://127.0.0.1:9080`)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("url %q is not a URL: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("url %q must be absolute http:// or https://", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", fmt.Errorf("url %q has no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return "", fmt.Errorf("url %q must not have a query or fragment", raw)
	}
	return strings.TrimRight(raw, "/"), nil
}

// formatTime prints a Unix-millisecond timestamp as RFC 3339 in UTC.
func formatTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
