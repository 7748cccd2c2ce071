// The echo service of bench/compare for Restate: Echo/echo returns its input,
// so Restate measures its durable invocation path as raftgate's bench/echo
// does for raftgate. PORT picks the listen port (default 9080).

// The SDK uses Promise.withResolvers (Node 22+); Node 20 lacks it, so provide
// it before the SDK loads (hence the dynamic import below).
if (typeof Promise.withResolvers !== "function") {
  Promise.withResolvers = function withResolvers() {
    let resolve;
    let reject;
    const promise = new this((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}

const restate = await import("@restatedev/restate-sdk");

const echo = restate.service({
  name: "Echo",
  handlers: {
    echo: async (_ctx, input) => input,
  },
});

restate.endpoint().bind(echo).listen(Number(process.env.PORT ?? 9080));
