package testutil

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestWaitForSeesALateCondition(t *testing.T) {
	calls := 0
	WaitFor(t, 10*time.Second, "the fifth check", func() bool { calls++; return calls == 5 })
	if calls != 5 {
		t.Fatalf("condition checked %d times, want 5", calls)
	}
}

// failRecorder records a WaitFor failure instead of failing the test.
type failRecorder struct {
	testing.TB
	msg string
}

func (f *failRecorder) Helper() {}
func (f *failRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f) // Fatalf must not return
}

func TestWaitForTimesOutNamingTheCondition(t *testing.T) {
	rec := &failRecorder{TB: t}
	func() {
		defer func() {
			if r := recover(); r != rec {
				panic(r)
			}
		}()
		WaitFor(rec, 30*time.Millisecond, "the impossible", func() bool { return false })
	}()
	if want := "timed out after 30ms waiting for the impossible"; rec.msg != want {
		t.Fatalf("failure %q, want %q", rec.msg, want)
	}
}

func TestDoReadsTheWholeAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-seen", r.Header.Get("x-in"))
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	}))
	defer srv.Close()
	r := Do(t, http.MethodPost, srv.URL+"/p", "body", "x-in", "v")
	if r.Status != http.StatusTeapot || r.Header.Get("x-seen") != "v" || string(r.Body) != "POST /p" {
		t.Fatalf("got %d %v %q", r.Status, r.Header, r.Body)
	}
}

func TestLockedBuffer(t *testing.T) {
	var b LockedBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			fmt.Fprint(&b, "x")
		}
	}()
	for {
		select {
		case <-done:
			if got := len(b.String()); got != 100 {
				t.Fatalf("%d bytes, want 100", got)
			}
			return
		default:
			_ = b.String() // read while written: -race checks the lock
		}
	}
}
