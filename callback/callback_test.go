package callback

import (
	"errors"
	"testing"
)

func TestAllow(t *testing.T) {
	a, err := ParseAllow([]string{"http://127.0.0.1:9000", " https://Hooks.Example/ ", ""})
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"http://127.0.0.1:9000/done", "http://127.0.0.1:9000", "https://hooks.example/a?b=c", "HTTPS://HOOKS.EXAMPLE/x"} {
		if err := a.Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want allowed", ok, err)
		}
	}
	for _, bad := range []string{"http://127.0.0.1:9001/done", "https://127.0.0.1:9000/", "http://hooks.example/", "ftp://hooks.example/",
		"/relative", "http://user:pw@127.0.0.1:9000/", "http:///nohost", "::bad"} {
		if err := a.Check(bad); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("Check(%q) = %v, want ErrNotAllowed", bad, err)
		}
	}
	if err := (Allow{}).Check("http://127.0.0.1:9000/"); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("empty allow-list allowed a URL: %v", err)
	}
	for _, bad := range []string{"http://127.0.0.1:9000/path", "127.0.0.1:9000", "http://u@h"} {
		if _, err := ParseAllow([]string{bad}); err == nil {
			t.Errorf("ParseAllow(%q) accepted it", bad)
		}
	}
}

func TestSignVerify(t *testing.T) {
	secret, body := []byte("s3cret"), []byte(`{"invocationId":"inv_1"}`)
	sig := Sign(secret, body)
	// Computed independently: printf %s body | openssl dgst -sha256 -hmac s3cret
	if want := "sha256=2c25571364a5dd43f254835f7ef9602c6660acb7d8633f776435295da1000fc8"; sig != want {
		t.Fatalf("Sign = %q, want %q", sig, want)
	}
	if !Verify(secret, body, sig) {
		t.Fatal("Verify refused its own signature")
	}
	for _, bad := range []struct {
		secret, body []byte
		sig          string
	}{
		{[]byte("other"), body, sig},
		{secret, []byte(`{"invocationId":"inv_2"}`), sig},
		{secret, body, sig[7:]},
		{secret, body, "sha256=zz"},
	} {
		if Verify(bad.secret, bad.body, bad.sig) {
			t.Errorf("Verify(%q, %q, %q) = true", bad.secret, bad.body, bad.sig)
		}
	}
}

func TestResultJSON(t *testing.T) {
	for in, want := range map[string]string{"": "null", `{"a":1}`: `{"a":1}`, "hi": `"hi"`, `"x"`: `"x"`} {
		if got := string(ResultJSON([]byte(in))); got != want {
			t.Errorf("ResultJSON(%q) = %s, want %s", in, got, want)
		}
	}
}
