package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftgate/raftgate/server"
)

// Default URLs of the operator tools: the default addresses of docs/api.md.
const (
	defaultAdminURL   = "http://" + server.DefaultAdminAddr
	defaultIngressURL = "http://" + server.DefaultIngressAddr
)

// apiError is a non-2xx answer of the admin or ingress API.
type apiError struct {
	Status  int    // HTTP status
	Message string // from the JSON error body, or the raw body
	Source  string // admin, ingress or invocation, when the body said so
}

func (e *apiError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Source != "" {
		return fmt.Sprintf("%d from %s: %s", e.Status, e.Source, msg)
	}
	return fmt.Sprintf("%d: %s", e.Status, msg)
}

// errorFromResponse reads a {code,message,source} body, or keeps the raw
// text when the body is something else.
func errorFromResponse(status int, body []byte) *apiError {
	var e struct {
		Message string `json:"message"`
		Source  string `json:"source"`
	}
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		return &apiError{Status: status, Message: e.Message, Source: e.Source}
	}
	return &apiError{Status: status, Message: strings.TrimSpace(string(body))}
}

// adminClient calls the admin API.
type adminClient struct {
	base  string // like http://127.0.0.1:9070
	token string
	http  *http.Client
}

// addAdminFlags registers --admin and --admin-token on cmd and returns a
// constructor for the client they describe.
func addAdminFlags(cmd *cobra.Command) func() *adminClient {
	c := &adminClient{http: &http.Client{Timeout: 30 * time.Second}}
	cmd.PersistentFlags().StringVar(&c.base, "admin", defaultAdminURL, "admin API base URL")
	cmd.PersistentFlags().StringVar(&c.token, "admin-token", "", "bearer token of the admin API")
	return func() *adminClient {
		c.base = normalizeBaseURL(c.base)
		return c
	}
}

// normalizeBaseURL accepts host:port as well as a URL.
func normalizeBaseURL(u string) string {
	u = strings.TrimRight(strings.TrimSpace(u), "/")
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return u
}

// do sends a JSON request (body may be nil) and decodes a JSON answer into
// out (may be nil). Non-2xx answers are *apiError.
func (c *adminClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", c.base, err)
	}
	if resp.StatusCode/100 != 2 {
		return errorFromResponse(resp.StatusCode, data)
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("admin API at %s: unexpected answer: %w", c.base, err)
	}
	return nil
}

// isStatus reports whether err is an API answer with the given status.
func isStatus(err error, status int) bool {
	var e *apiError
	return errors.As(err, &e) && e.Status == status
}
