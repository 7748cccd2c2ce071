package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestEchoReturnsBodyAndCountsDistinctIDs(t *testing.T) {
	srv := httptest.NewServer(&stats{ids: map[string]struct{}{}})
	defer srv.Close()
	for _, id := range []string{"inv_a", "inv_b", "inv_a", ""} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/Echo/echo", strings.NewReader(`"hi"`))
		req.Header.Set("content-type", "application/json")
		if id != "" {
			req.Header.Set("x-restate-id", id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != `"hi"` || resp.Header.Get("content-type") != "application/json" {
			t.Fatalf("echo: %d %q %q", resp.StatusCode, body, resp.Header.Get("content-type"))
		}
	}
	resp, err := http.Get(srv.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct{ Deliveries, DistinctIds, WithoutId int }
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Deliveries != 3 || got.DistinctIds != 2 || got.WithoutId != 1 {
		t.Fatalf("stats %+v, want 3 deliveries of 2 ids and 1 without an id", got)
	}
}

func TestEchoRefusesGet(t *testing.T) {
	srv := httptest.NewServer(&stats{ids: map[string]struct{}{}})
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/Echo/echo")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d, want 405", resp.StatusCode)
	}
}
