package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftgate/raftgate/server"
	"github.com/raftgate/raftgate/server/servertest"
	"github.com/raftgate/raftgate/test/freeport"
)

// tsScript drives the ingress with Restate's TypeScript client
// (@restatedev/restate-sdk-clients) and prints what it saw as JSON.
const tsScript = `
const clients = require("@restatedev/restate-sdk-clients");
(async () => {
  const out = {};
  try {
    await clients.connect({ url: process.env.INGRESS_URL }).serviceClient({ name: "Greeter" }).greet({ name: "eve" });
  } catch (e) {
    out.noToken = { status: e.status };
  }
  const rs = clients.connect({ url: process.env.INGRESS_URL, headers: { Authorization: "Bearer " + process.env.TOKEN } });
  const greeter = rs.serviceClient({ name: "Greeter" });
  out.call = await greeter.greet({ name: "ann" });
  out.keyedCall = await greeter.greet({ name: "bob" }, clients.Opts.from({ idempotencyKey: "k1" }));
  const sender = rs.serviceSendClient({ name: "Greeter" });
  const sent = await sender.greet({ name: "cy" }, clients.SendOpts.from({ delay: 1500, idempotencyKey: "k2" }));
  out.send = { status: sent.status, prefix: sent.invocationId.slice(0, 4), attachable: sent.attachable };
  const again = await sender.greet({ name: "cy" }, clients.SendOpts.from({ idempotencyKey: "k2" }));
  out.sendAgain = { status: again.status, same: again.invocationId === sent.invocationId };
  out.result = await rs.result(sent);
  try {
    await rs.serviceClient({ name: "Nope" }).greet({});
  } catch (e) {
    out.unknown = { status: e.status, body: JSON.parse(e.responseText) };
  }
  try {
    await greeter.wave({});
  } catch (e) {
    out.unknownHandler = { status: e.status };
  }
  const counter = rs.objectClient({ name: "Counter" }, "a/b");
  out.objectCall = await counter.add({ n: 1 });
  const objSend = await rs.objectSendClient({ name: "Counter" }, "a/b").add({ n: 2 }, clients.SendOpts.from({ idempotencyKey: "o1" }));
  out.objectSend = { status: objSend.status };
  out.objectResult = await rs.result(objSend);
  const wf = rs.workflowClient({ name: "Signup" }, "w1");
  const sub = await wf.workflowSubmit({ user: "ann" });
  const resubmit = await wf.workflowSubmit({ user: "bob" });
  out.workflow = { status: sub.status, again: resubmit.status, same: sub.invocationId === resubmit.invocationId };
  out.workflowAttach = await wf.workflowAttach();
  const output = await wf.workflowOutput();
  out.workflowOutput = { ready: output.ready, result: output.result };
  try {
    await wf.run({ user: "cy" });
  } catch (e) {
    out.workflowCallAgain = { status: e.status };
  }
  out.workflowShared = await wf.status({ q: 1 });
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
`

// TestTypeScriptClient checks compatibility with Restate's TypeScript
// client, through an ingress that requires an API token (the client sends
// it as a header; without it the answer is 401). It runs only when RAFTGATE_TS_CLIENT_DIR names a directory whose
// node_modules holds @restatedev/restate-sdk-clients (npm install it there)
// and node is installed.
func TestTypeScriptClient(t *testing.T) {
	dir := os.Getenv("RAFTGATE_TS_CLIENT_DIR")
	if dir == "" {
		t.Skip("RAFTGATE_TS_CLIENT_DIR not set")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	const token = "ts-client-token-0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens.toml")
	if err := os.WriteFile(tokens, []byte("[[token]]\nname = \"ts\"\ntoken = \""+token+"\"\nservices = [\"*\"]\nattach = true\noutput = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, cfgs := servertest.StartCluster(t, 1, freeport.Client, func(c *server.Config) { c.IngressTokens = tokens })
	// Every handler answers its request's body.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		io.Copy(w, r.Body)
	}))
	t.Cleanup(echo.Close)
	for name, reg := range map[string]string{
		"Greeter": `{"url":"` + echo.URL + `","handlers":["greet"]}`,
		"Counter": `{"url":"` + echo.URL + `","kind":"object"}`,
		"Signup":  `{"url":"` + echo.URL + `","kind":"workflow"}`,
	} {
		if err := register(cfgs[0].AdminAddr, name, reg); err != nil {
			t.Fatal(err)
		}
	}
	ingressURL := "http://" + cfgs[0].IngressAddr
	script := filepath.Join(t.TempDir(), "drive.cjs")
	if err := os.WriteFile(script, []byte(tsScript), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), "INGRESS_URL="+ingressURL, "TOKEN="+token, "NODE_PATH="+filepath.Join(dir, "node_modules"))
	outb, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("node: %v\n%s\n%s", err, outb, stderr)
	}
	var got struct {
		NoToken struct {
			Status int `json:"status"`
		} `json:"noToken"`
		Call      map[string]string `json:"call"`
		KeyedCall map[string]string `json:"keyedCall"`
		Send      struct {
			Status     string `json:"status"`
			Prefix     string `json:"prefix"`
			Attachable bool   `json:"attachable"`
		} `json:"send"`
		SendAgain struct {
			Status string `json:"status"`
			Same   bool   `json:"same"`
		} `json:"sendAgain"`
		Result  map[string]string `json:"result"`
		Unknown struct {
			Status int `json:"status"`
			Body   struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Source  string `json:"source"`
			} `json:"body"`
		} `json:"unknown"`
		UnknownHandler struct {
			Status int `json:"status"`
		} `json:"unknownHandler"`
		ObjectCall   map[string]int          `json:"objectCall"`
		ObjectSend   struct{ Status string } `json:"objectSend"`
		ObjectResult map[string]int          `json:"objectResult"`
		Workflow     struct {
			Status, Again string
			Same          bool
		} `json:"workflow"`
		WorkflowAttach map[string]string `json:"workflowAttach"`
		WorkflowOutput struct {
			Ready  bool
			Result map[string]string
		} `json:"workflowOutput"`
		WorkflowCallAgain struct{ Status int } `json:"workflowCallAgain"`
		WorkflowShared    map[string]int       `json:"workflowShared"`
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("node printed %q: %v", outb, err)
	}
	t.Logf("TypeScript client saw: %s", outb)
	if got.NoToken.Status != 401 {
		t.Fatalf("without a token: %+v, want 401", got.NoToken)
	}
	if got.Call["name"] != "ann" || got.KeyedCall["name"] != "bob" || got.Result["name"] != "cy" {
		t.Fatalf("results: %+v", got)
	}
	if got.Send.Status != "Accepted" || got.Send.Prefix != "inv_" || !got.Send.Attachable ||
		got.SendAgain.Status != "PreviouslyAccepted" || !got.SendAgain.Same {
		t.Fatalf("sends: %+v %+v", got.Send, got.SendAgain)
	}
	if got.Unknown.Status != 404 || got.Unknown.Body.Code != 404 || got.Unknown.Body.Source != "ingress" ||
		got.UnknownHandler.Status != 404 {
		t.Fatalf("errors: %+v %+v", got.Unknown, got.UnknownHandler)
	}
	if got.ObjectCall["n"] != 1 || got.ObjectSend.Status != "Accepted" || got.ObjectResult["n"] != 2 {
		t.Fatalf("objectClient: %+v %+v %+v", got.ObjectCall, got.ObjectSend, got.ObjectResult)
	}
	if got.Workflow.Status != "Accepted" || got.Workflow.Again != "PreviouslyAccepted" || !got.Workflow.Same ||
		got.WorkflowAttach["user"] != "ann" || !got.WorkflowOutput.Ready || got.WorkflowOutput.Result["user"] != "ann" ||
		got.WorkflowCallAgain.Status != 409 || got.WorkflowShared["q"] != 1 {
		t.Fatalf("workflowClient: %+v", got)
	}
}
