package test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// verdict is what validating one recording found.
type verdict struct {
	ops, acked, unknown int
	lost, wrong         int // acknowledged without a result; a result not its own
	multiResults        int // invocations seen with two different recorded results
	stale404            int // output/attach 404 for an invocation acknowledged before the read
	keyConflicts        int // idempotency keys answered with two invocation ids
	neverDelivered      int // completed but the service never saw it
	distinct, delivered int // recorder: invocations seen, deliveries
	linearizable        porcupine.CheckResult
	problems            []string
}

func (v *verdict) problem(format string, args ...any) {
	if len(v.problems) < 50 {
		v.problems = append(v.problems, fmt.Sprintf(format, args...))
	}
}

// taggedResult is a result of the tagging recorder.
type taggedResult struct {
	In       json.RawMessage `json:"in"`
	Delivery int             `json:"delivery"`
}

// ownResult reports whether body is a result produced for payload.
func ownResult(body, payload string) bool {
	var r taggedResult
	return json.Unmarshal([]byte(body), &r) == nil && string(r.In) == payload
}

// validate checks the recorded history once traffic has stopped and the
// cluster is whole again: every acknowledged invocation is attached to
// (through the nodes in turn) and must have exactly its own result.
func validate(c *cluster, rec *recording, svc *recorder, service string) verdict {
	rec.mu.Lock()
	ops := append([]*op(nil), rec.ops...)
	v := verdict{ops: len(ops)}
	for _, a := range rec.anomalies {
		v.problem("anomaly: %s", a)
	}
	for key, ids := range rec.idsByKey {
		if len(ids) > 1 {
			v.keyConflicts++
			v.problem("idempotency key %s answered with %d invocation ids: %v", key, len(ids), ids)
		}
	}
	rec.mu.Unlock()

	results := map[string]map[string]bool{} // invocation id -> distinct result bodies
	note := func(id, body string) {
		if results[id] == nil {
			results[id] = map[string]bool{}
		}
		results[id][body] = true
	}
	var firsts []*op
	for _, o := range ops {
		switch {
		case o.isSubmit() && !o.Acked:
			v.unknown++
		case o.Kind == kindResend:
			if o.ID != o.Target.ID {
				v.problem("resend of key %s returned %s, first send %s", o.Key, o.ID, o.Target.ID)
			}
		case o.isSubmit():
			v.acked++
			firsts = append(firsts, o)
			if o.Kind == kindCall {
				note(o.ID, o.Body)
				if !ownResult(o.Body, o.Payload) {
					v.wrong++
					v.problem("call %s (%s): result %s, want input %s", o.ID, o.Key, o.Body, o.Payload)
				}
			}
		case o.Status == http.StatusOK:
			note(o.Target.ID, o.Body)
			if !ownResult(o.Body, o.Target.Payload) {
				v.wrong++
				v.problem("%s %s: result %s, want input %s", o.Kind, o.Target.ID, o.Body, o.Target.Payload)
			}
		case o.Status == http.StatusNotFound && o.Target.End.Before(o.Start):
			v.stale404++
			v.problem("%s of %s (key %q) answered 404 %v after its acknowledgement", o.Kind, o.Target.ID, o.Target.Key, o.Start.Sub(o.Target.End))
		}
	}

	final := attachAll(c, service, firsts)
	for i, o := range firsts {
		r := final[i]
		switch {
		case r.err != nil:
			v.lost++
			v.problem("acknowledged %s %s (key %q) has no result: %v", o.Kind, o.ID, o.Key, r.err)
		case !ownResult(r.body, o.Payload):
			v.wrong++
			v.problem("%s %s: final result %s, want input %s", o.Kind, o.ID, r.body, o.Payload)
		default:
			note(o.ID, r.body)
			if svc.count(o.ID) < 1 {
				v.neverDelivered++
				v.problem("%s completed but the service never saw it", o.ID)
			}
		}
	}
	for id, bodies := range results {
		if len(bodies) > 1 {
			v.multiResults++
			v.problem("invocation %s was answered with %d different results: %v", id, len(bodies), bodies)
		}
	}
	v.distinct, v.delivered = svc.stats()
	var illegal []string
	v.linearizable, illegal = checkLinearizable(ops)
	for _, k := range illegal {
		v.problem("history of invocation %s is not linearizable (absent/pending/completed model): %s", k, describeKey(ops, k))
	}
	return v
}

type finalResult struct {
	body string
	err  error
}

// attachAll attaches to each invocation by id with a few workers, retrying
// retry-safe answers through the nodes in turn until a shared deadline.
func attachAll(c *cluster, service string, ops []*op) []finalResult {
	out := make([]finalResult, len(ops))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				out[i] = attachOne(ctx, c, ops[i].ID, i)
			}
		}()
	}
	for i := range ops {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

func attachOne(ctx context.Context, c *cluster, id string, start int) finalResult {
	var last string
	for i := 0; ctx.Err() == nil; i++ {
		n := c.nodes[(start+i)%len(c.nodes)]
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := do(actx, http.MethodGet, n.ingressURL()+"/restate/invocation/"+id+"/attach?timeout=5s", nil, nil)
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		case r.status == http.StatusOK:
			return finalResult{body: string(r.body)}
		case r.status == http.StatusServiceUnavailable || r.status == http.StatusTooManyRequests || r.status == statusNotReady:
			last = fmt.Sprintf("%d %s", r.status, r.body)
		default:
			return finalResult{err: fmt.Errorf("attach via node %d: %d %s", n.id, r.status, r.body)}
		}
		retryPause(ctx, r, i)
	}
	return finalResult{err: fmt.Errorf("no result before the deadline; last answer: %s", last)}
}

// The linearizability model is one register per invocation (idempotency
// key, or id for keyless sends): absent → pending → completed(result).
// Completion is not a client operation, so a read may move pending to
// completed; a submit with no acknowledgement may or may not have taken
// effect (its return time is infinite).
type (
	lzInput  struct{ submit bool }
	lzOutput struct {
		known  bool // the submit was acknowledged / the read answered
		status int
		result string
	}
	lzState struct {
		phase  int // 0 absent, 1 pending, 2 completed
		result string
	}
)

func invocationModel() porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var order []string
			for _, o := range history {
				k := o.Metadata.(string)
				if _, ok := byKey[k]; !ok {
					order = append(order, k)
				}
				byKey[k] = append(byKey[k], o)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, k := range order {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() []any { return []any{lzState{}} },
		Step: func(state, input, output any) []any {
			s, in, out := state.(lzState), input.(lzInput), output.(lzOutput)
			if in.submit {
				switch {
				case !out.known && s.phase == 0:
					return []any{s, lzState{phase: 1}}
				case !out.known:
					return []any{s}
				case out.status == http.StatusOK: // a call: acknowledged with its result
					if s.phase < 2 || s.result == out.result {
						return []any{lzState{phase: 2, result: out.result}}
					}
					return nil
				case s.phase == 0:
					return []any{lzState{phase: 1}}
				default:
					return []any{s}
				}
			}
			switch {
			case out.status == http.StatusNotFound && s.phase == 0:
				return []any{s}
			case out.status == statusNotReady && s.phase == 1:
				return []any{s}
			case out.status == http.StatusOK && s.phase == 1:
				return []any{lzState{phase: 2, result: out.result}}
			case out.status == http.StatusOK && s.phase == 2 && s.result == out.result:
				return []any{s}
			}
			return nil
		},
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("%+v -> %+v", input, output)
		},
	}
}

// checkLinearizable runs porcupine over the submits and definitive reads;
// when the history is illegal it names the invocations (keys) at fault.
func checkLinearizable(ops []*op) (porcupine.CheckResult, []string) {
	var hist []porcupine.Operation
	var t0 time.Time
	for _, o := range ops {
		if t0.IsZero() || o.Start.Before(t0) {
			t0 = o.Start
		}
	}
	for _, o := range ops {
		key := o.Key
		if key == "" {
			key = o.ID
		}
		if key == "" {
			continue // keyless send never acknowledged: nothing can observe it
		}
		ret := o.End.Sub(t0).Nanoseconds()
		var in lzInput
		var out lzOutput
		switch {
		case o.isSubmit():
			in.submit = true
			out = lzOutput{known: o.Acked, status: o.Status, result: o.Body}
			if !o.Acked {
				ret = math.MaxInt64
			}
		case o.Kind == kindAttach && o.Status == statusNotReady:
			continue // the attach's own timeout passed: it claims nothing (docs/api.md)
		case o.Status != 0:
			out = lzOutput{known: true, status: o.Status, result: o.Body}
		default:
			continue // a read with no definitive answer observed nothing
		}
		hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: in, Output: out,
			Call: o.Start.Sub(t0).Nanoseconds(), Return: ret, Metadata: key})
	}
	nd := invocationModel()
	model := nd.ToModel()
	res := porcupine.CheckOperationsTimeout(model, hist, 30*time.Second)
	if res != porcupine.Illegal {
		return res, nil
	}
	var illegal []string
	for _, part := range model.Partition(hist) {
		if porcupine.CheckOperationsTimeout(model, part, 10*time.Second) == porcupine.Illegal {
			illegal = append(illegal, part[0].Metadata.(string))
		}
	}
	return res, illegal
}

// describeKey lists the operations on one invocation, times relative to
// the first, for a failure message.
func describeKey(ops []*op, key string) string {
	var b strings.Builder
	var t0 time.Time
	for _, o := range ops {
		if o.Key == key || (o.Key == "" && o.ID == key) {
			if t0.IsZero() {
				t0 = o.Start
			}
		}
	}
	for _, o := range ops {
		if o.Key != key && (o.Key != "" || o.ID != key) {
			continue
		}
		fmt.Fprintf(&b, "\n  client %d %s [%v, %v] acked=%v status=%d body=%s id=%s attempts:",
			o.Client, o.Kind, o.Start.Sub(t0).Round(time.Millisecond), o.End.Sub(t0).Round(time.Millisecond), o.Acked, o.Status, o.Body, o.ID)
		for _, a := range o.Attempts {
			fmt.Fprintf(&b, " node%d@%v:%d%s", a.Node, a.Start.Sub(t0).Round(time.Millisecond), a.Status, a.Err)
		}
	}
	return b.String()
}
