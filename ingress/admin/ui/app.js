// raftgate operator console: plain JavaScript over the admin API of the
// node that serves it. No data is embedded; every figure is fetched with the
// operator's token, and every API error is shown in the #error banner.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const tokenKey = "raftgate.adminToken";

// ---------------------------------------------------------------- API

class APIError extends Error {
  // detail is the API's own message, without the status and request.
  constructor(status, message, detail) {
    super(`${status}: ${message}`);
    this.status = status;
    this.detail = detail ?? message;
  }
}

async function api(method, path, body) {
  const headers = {};
  const token = sessionStorage.getItem(tokenKey);
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new APIError(0, `admin API unreachable (${e.message})`);
  }
  const text = await resp.text();
  if (!resp.ok) {
    let msg = text.trim() || resp.statusText;
    try { msg = JSON.parse(text).message || msg; } catch (_) { /* not JSON: keep the text */ }
    if (resp.status === 401) askForToken();
    throw new APIError(resp.status, `${method} ${path}: ${msg}`, msg);
  }
  const type = resp.headers.get("content-type") || "";
  return type.includes("application/json") ? JSON.parse(text) : text;
}

// errors holds the last failure of each kind of call (metrics, cluster,
// services, ...); the banner shows them all until that kind succeeds again,
// so a refresh of one thing never hides the failure of another.
const errors = new Map();

function showErrors() {
  const box = $("#error");
  box.textContent = [...errors.values()].join("\n");
  box.hidden = errors.size === 0;
}

function showError(err) {
  errors.clear();
  if (err) errors.set("", String(err.message || err));
  showErrors();
}

// run calls fn and shows its error under key, if any; a success clears
// that key's error.
async function run(key, fn) {
  try {
    await fn();
    errors.delete(key);
  } catch (e) {
    errors.set(key, String(e.message || e));
  }
  showErrors();
}

function askForToken() {
  $("#token-form").hidden = false;
  $("main").hidden = true;
}

$("#token-form").addEventListener("submit", ev => {
  ev.preventDefault();
  showError(null);
  sessionStorage.setItem(tokenKey, $("#token-input").value.trim());
  $("#token-input").value = "";
  $("#token-form").hidden = true;
  $("main").hidden = false;
  route();
});
$("#token-change").addEventListener("click", askForToken);

// ---------------------------------------------------------------- helpers

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return e;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function dash(v) { return v === undefined || v === null || v === "" ? "–" : String(v); }

function localTime(rfc3339) {
  if (!rfc3339) return "–";
  const d = new Date(rfc3339);
  return d.toLocaleString(undefined, { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function statusBadge(status, failed, heldBy) {
  const cls = status === "completed" ? (failed ? "bad" : "ok") : status === "running" || status === "paused" ? "warn" : "";
  const badge = el("span", { class: "badge " + cls, "data-status": status }, failed ? "failed" : status);
  return heldBy ? el("span", {}, badge, el("div", { class: "muted", "data-field": "held-by" }, "held by " + heldBy)) : badge;
}

// ---------------------------------------------------------------- routing

let timers = [];
function stopTimers() { timers.forEach(clearInterval); timers = []; }

function route() {
  stopTimers();
  showError(null); // errors of the page left behind
  const hash = location.hash.replace(/^#\/?/, "") || "overview";
  const [page, ...rest] = hash.split("/");
  const [name, query] = page.split("?");
  for (const s of document.querySelectorAll("main > section")) s.hidden = true;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.nav === name);
  if (!$("#token-form").hidden) return;
  if ((name === "objects" || name === "workflows") && rest.length >= 2) {
    showKey(name === "objects" ? "object" : "workflow", decodeURIComponent(rest[0]), decodeURIComponent(rest.slice(1).join("/")));
  } else if (name === "invocations" && rest.length > 0) {
    const [id, q] = rest.join("/").split("?");
    showInvocation(decodeURIComponent(id), new URLSearchParams(q));
  } else if (name === "invocations") {
    showInvocations(new URLSearchParams(query));
  } else if (name === "services") {
    showServices();
  } else if (name === "schedules") {
    showSchedules();
  } else {
    showOverview();
  }
}
window.addEventListener("hashchange", route);

// ---------------------------------------------------------------- overview

// Prometheus text exposition: returns [{name, labels, value}].
function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      }
    }
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

function sum(samples, name, match = () => true) {
  return samples.filter(s => s.name === name && match(s.labels)).reduce((a, s) => a + s.value, 0);
}

// histogram buckets of one route: Map le -> cumulative count.
function buckets(samples, route) {
  const b = new Map();
  for (const s of samples) {
    if (s.name === "raftgate_ingress_request_duration_seconds_bucket" && s.labels.route === route) {
      const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
      b.set(le, (b.get(le) || 0) + s.value);
    }
  }
  return b;
}

// quantile over the observations between two scrapes, as Prometheus'
// histogram_quantile does (linear within the bucket); null if none.
function quantile(q, prev, cur) {
  const les = [...cur.keys()].sort((a, b) => a - b);
  const counts = les.map(le => cur.get(le) - (prev.get(le) || 0));
  const total = counts[counts.length - 1];
  if (!(total > 0)) return null;
  const rank = q * total;
  for (let i = 0; i < les.length; i++) {
    if (counts[i] >= rank) {
      if (les[i] === Infinity) return les[i - 1] ?? null;
      const lo = i === 0 ? 0 : les[i - 1];
      const below = i === 0 ? 0 : counts[i - 1];
      const inBucket = counts[i] - below;
      return lo + (les[i] - lo) * (inBucket > 0 ? (rank - below) / inBucket : 1);
    }
  }
  return null;
}

const chartPoints = 60;
const series = { accepted: [], succeeded: [], failed: [], callP50: [], callP99: [], sendP50: [], sendP99: [] };
let lastScrape = null;

function pushPoint(name, v) {
  series[name].push(v);
  if (series[name].length > chartPoints) series[name].shift();
}

async function scrapeMetrics() {
  const text = await api("GET", "/metrics");
  const samples = parseMetrics(text);
  const now = performance.now();
  const cur = {
    t: now,
    accepted: sum(samples, "raftgate_partition_invocations_accepted_total"),
    succeeded: sum(samples, "raftgate_partition_results_recorded_total", l => l.outcome === "succeeded"),
    failed: sum(samples, "raftgate_partition_results_recorded_total", l => l.outcome === "failed"),
    call: buckets(samples, "call"),
    send: buckets(samples, "send"),
  };
  const started = samples.find(s => s.name === "process_start_time_seconds");
  $("#node-started").textContent = started ? "at " + localTime(new Date(started.value * 1000).toISOString()) : "start time unknown";
  $("#total-accepted").textContent = cur.accepted;
  $("#total-succeeded").textContent = cur.succeeded;
  $("#total-failed").textContent = cur.failed;
  if (lastScrape) {
    const dt = (cur.t - lastScrape.t) / 1000;
    for (const k of ["accepted", "succeeded", "failed"]) {
      const d = cur[k] - lastScrape[k];
      pushPoint(k, d >= 0 ? d / dt : null); // a restart resets counters: a gap
    }
    const ms = v => (v === null ? null : v * 1000);
    pushPoint("callP50", ms(quantile(0.5, lastScrape.call, cur.call)));
    pushPoint("callP99", ms(quantile(0.99, lastScrape.call, cur.call)));
    pushPoint("sendP50", ms(quantile(0.5, lastScrape.send, cur.send)));
    pushPoint("sendP99", ms(quantile(0.99, lastScrape.send, cur.send)));
  }
  lastScrape = cur;
  drawChart($("#chart-rates"), [
    { name: "accepted", color: "#2563eb", data: series.accepted },
    { name: "succeeded", color: "#15803d", data: series.succeeded },
    { name: "failed", color: "#b91c1c", data: series.failed },
  ], "/s");
  drawChart($("#chart-call"), [
    { name: "p50", color: "#2563eb", data: series.callP50 },
    { name: "p99", color: "#b45309", data: series.callP99 },
  ], " ms");
  drawChart($("#chart-send"), [
    { name: "p50", color: "#2563eb", data: series.sendP50 },
    { name: "p99", color: "#b45309", data: series.sendP99 },
  ], " ms");
}

function fmt(v) {
  if (v === null || v === undefined) return "–";
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
}

// drawChart renders lines as inline SVG with a y axis from 0 to the max.
function drawChart(box, lines, unit) {
  const W = Math.max(300, box.clientWidth), H = 170, L = 44, B = 18;
  const values = lines.flatMap(l => l.data.filter(v => v !== null));
  const top = values.length ? niceCeil(Math.max(...values, 1e-3)) : 1;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
  };
  for (let i = 0; i <= 4; i++) {
    const y = 4 + (H - B - 4) * (1 - i / 4);
    add("line", { x1: L, x2: W, y1: y, y2: y, stroke: "#e3e6eb" });
    add("text", { x: L - 6, y: y + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7280" }, fmt(top * i / 4));
  }
  add("text", { x: L, y: H - 3, "font-size": 11, fill: "#6b7280" }, `last ${chartPoints} s`);
  for (const line of lines) {
    let d = "";
    const known = i => i >= 0 && i < line.data.length && line.data[i] !== null;
    line.data.forEach((v, i) => {
      if (v === null) return;
      const x = L + (W - L) * (i + chartPoints - line.data.length) / (chartPoints - 1);
      const y = 4 + (H - B - 4) * (1 - v / top);
      d += (known(i - 1) ? " L" : " M") + x.toFixed(1) + " " + y.toFixed(1);
      if (!known(i - 1) && !known(i + 1)) add("circle", { cx: x, cy: y, r: 2.5, fill: line.color }); // a lone point
    });
    if (d) add("path", { d, fill: "none", stroke: line.color, "stroke-width": 1.8 });
  }
  const legend = el("div", { class: "legend" }, ...lines.map(l => {
    const last = l.data.length ? l.data[l.data.length - 1] : null;
    const sw = el("span", { class: "swatch" });
    sw.style.background = l.color;
    return el("span", { "data-series": l.name }, sw, l.name + " ", el("b", {}, fmt(last) + (last === null ? "" : unit)));
  }));
  box.replaceChildren(svg, legend);
}

function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

let clusterCache = null;

// nodeTable is GET /nodes, the cluster's node table (states, zones, removed
// nodes), or null when this node does not serve it (501, or 404 from an
// older release): the overview then shows what gossip knows. Its other
// failures go to the banner without hiding the rest of the overview.
async function nodeTable() {
  try {
    const t = await api("GET", "/nodes");
    errors.delete("nodes");
    return t;
  } catch (e) {
    if (e.status !== 501 && e.status !== 404) errors.set("nodes", String(e.message || e));
    return null;
  }
}

// placementRecord is GET /placement (each partition's replicas with roles,
// preferred leader and move in flight), or null when this node does not
// serve it (501, or 404 from an older release), as for the node table.
async function placementRecord() {
  try {
    const p = await api("GET", "/placement");
    errors.delete("placement");
    return p;
  } catch (e) {
    if (e.status !== 501 && e.status !== 404) errors.set("placement", String(e.message || e));
    return null;
  }
}

const stateClass = { active: "ok", joining: "warn", draining: "warn", removed: "muted" };

async function loadCluster() {
  const [c, table, placement] = await Promise.all([api("GET", "/cluster?leaders=1"), nodeTable(), placementRecord()]);
  clusterCache = c;
  const ready = $("#ready");
  ready.textContent = c.ready ? "ready" : "NOT READY: a partition has no known leader";
  ready.className = "badge " + (c.ready ? "ok" : "bad");
  // A node some partition's leader no longer hears from is suspect while
  // gossip, which takes seconds longer to decide, still lists it alive.
  const silent = new Set(c.partitions.flatMap(p => p.replicas.filter(r => r.down).map(r => r.nodeId)));
  // One row per node gossip or the node table knows (removed ones too).
  const gossip = new Map(c.nodes.map(n => [n.id, n]));
  const known = new Map((table || []).map(n => [n.id, n]));
  const ids = [...new Set([...gossip.keys(), ...known.keys()])].sort((a, b) => a - b);
  fill($("#nodes tbody"), ids.map(id => {
    const g = gossip.get(id), t = known.get(id);
    const alive = g ? g.alive : t.alive;
    const adminAddr = g?.adminAddr || t?.admin;
    return el("tr", { "data-node": id },
      el("td", {}, String(id)),
      el("td", { class: stateClass[t?.state] || "", "data-field": "state" }, t ? t.state : "–"),
      el("td", { "data-field": "zone" }, dash(t?.zone)),
      alive && silent.has(id)
        ? el("td", { class: "warn", "data-field": "alive", title: "gossip lists it alive, but a partition leader has not heard from it" }, "suspect")
        : !alive && t?.state === "removed"
          ? el("td", { class: "muted", "data-field": "alive" }, "–")
          : el("td", { class: alive ? "ok" : "bad", "data-field": "alive" }, alive ? "alive" : "DOWN"),
      el("td", { class: "mono" }, dash(g?.ingressAddr || t?.ingress)),
      el("td", { class: "mono" }, adminAddr ? el("a", { href: `http://${adminAddr}/ui/` }, adminAddr) : "–"),
      el("td", { class: "mono" }, dash(g?.nodeAddr || t?.nodeAddr)),
      el("td", { class: "mono" }, dash(g?.gossipAddr)),
      el("td", {}, t?.state === "active" ? el("button", {
        type: "button", class: "danger", "data-remove-node": id,
        onclick: () => {
          $("#confirm-node-id").textContent = String(id);
          $("#confirm-remove-node").showModal();
        },
      }, "Remove…") : ""));
  }));
  const placementState = $("#placement-state");
  placementState.hidden = !placement;
  if (placement) {
    placementState.textContent = `replication ${placement.replication}` + (placement.paused ? ", rebalancing paused" : "");
    placementState.className = "badge" + (placement.paused ? " warn" : "");
  }
  const placed = new Map((placement?.partitions || []).map(p => [p.id, p]));
  const nodes = ids => ids.length ? ids.join(", ") : "–";
  fill($("#partitions tbody"), c.partitions.map(p => {
    const pl = placed.get(p.id);
    const known = p.replicas.length > 0;
    const down = p.replicas.filter(r => r.down || r.lag === null);
    const lag = known ? Math.max(...p.replicas.filter(r => !down.includes(r)).map(r => r.lag)) : null;
    const lagText = !known ? "unknown" : down.length ? `unknown (node ${down.map(r => r.nodeId).join(", ")} down)` : String(lag);
    const replicaText = r => r.down || r.lag === null
      ? `${r.nodeId}: down (match ${r.match}, lag unknown)`
      : `${r.nodeId}: ${r.match} / ${r.lag}${r.state && r.state !== "replicate" ? " (" + r.state + ")" : ""}`;
    return el("tr", { "data-partition": p.id },
      el("td", {}, p.id === 0 ? "0 (metadata)" : String(p.id)),
      el("td", { class: "mono" }, p.id === 0 ? "–" : `${BigInt(p.firstKey).toString(16).padStart(16, "0")}–${BigInt(p.lastKey).toString(16).padStart(16, "0")}`),
      el("td", { class: p.leader ? "" : "bad", "data-field": "leader" }, p.leader ? `node ${p.leader}` : "none"),
      el("td", {}, String(p.term)),
      el("td", {}, String(p.appliedIndex)),
      el("td", { class: down.length || lag > 100 ? "warn" : "", "data-field": "max-lag" }, lagText),
      el("td", { class: "mono", "data-field": "replicas" }, known ? p.replicas.map(replicaText).join("  ") : "unknown"),
      el("td", {}, p.outboxDepth === undefined ? (p.id === 0 ? "–" : "unknown") : String(p.outboxDepth)),
      el("td", { class: "mono", "data-field": "roles" }, pl ? pl.replicas.map(r => `${r.node}: ${r.role}`).join("  ") : "–"),
      el("td", { "data-field": "preferred" }, pl?.preferredLeader ? `node ${pl.preferredLeader}` : "–"),
      el("td", { class: pl?.move ? "warn" : "", "data-field": "move" }, pl?.move ? `${nodes(pl.move.from)} → ${nodes(pl.move.to)}` : "–"));
  }));
}

// A removal the cluster cannot spare is refused (409) with the reason,
// shown in the banner; an accepted one shows the node draining.
$("#confirm-remove-node").addEventListener("close", () => {
  if ($("#confirm-remove-node").returnValue !== "yes") return;
  const id = $("#confirm-node-id").textContent;
  run("remove-node", async () => {
    try {
      await api("DELETE", "/nodes/" + encodeURIComponent(id));
    } catch (e) {
      if (e.status === 409) throw new Error(`node ${id} was not removed: ${e.detail}`);
      throw e;
    }
    await loadCluster();
  });
});

function showOverview() {
  $("#view-overview").hidden = false;
  run("metrics", scrapeMetrics);
  run("cluster", loadCluster);
  timers.push(setInterval(() => run("metrics", scrapeMetrics), 1000));
  timers.push(setInterval(() => run("cluster", loadCluster), 2000));
}

// ---------------------------------------------------------------- services

async function loadServices() {
  const l = await api("GET", "/services");
  fill($("#services tbody"), l.services.map(s => el("tr", { "data-service": s.name, "data-kind": s.kind },
    el("td", {}, s.name),
    el("td", { "data-field": "kind" }, s.kind),
    el("td", { class: "mono" }, s.url, s.callbackUrl ? el("div", { class: "muted", "data-field": "callback" }, "callback → " + s.callbackUrl) : ""),
    el("td", {}, s.handlers.length ? s.handlers.join(", ") : "any"),
    el("td", { "data-field": "shared" }, (s.shared || []).join(", ") || "–"),
    el("td", { "data-field": "retry" }, retryText(s.retry)),
    el("td", { "data-field": "limits" }, limitsText(s)),
    el("td", { "data-field": "backlog", "data-backlog": s.name }, "…"),
    el("td", {}, localTime(s.updatedAt)),
    el("td", {}, el("button", {
      type: "button", class: "danger", "data-remove": s.name,
      onclick: () => run("remove", async () => {
        if (!confirm(`Remove service ${s.name}? Invocations of it will be refused.`)) return;
        await api("DELETE", "/services/" + encodeURIComponent(s.name));
        await loadServices();
      }),
    }, "Remove")))));
  if (l.services.length === 0) {
    fill($("#services tbody"), [el("tr", {}, el("td", { colspan: 10, class: "muted" }, "no services registered"))]);
  }
  // Each service's backlog is summed over the partitions' leaders by
  // GET /services/{name}: one read per service, filled in as they come.
  for (const s of l.services) {
    api("GET", "/services/" + encodeURIComponent(s.name)).then(v => {
      const cell = document.querySelector(`td[data-backlog="${CSS.escape(s.name)}"]`);
      if (cell) cell.textContent = v.backlogError ? "unavailable: " + v.backlogError : backlogText(v.backlog);
    }, () => {});
  }
}

// backlogText prints a service's backlog (GET /services/{name}).
function backlogText(b) {
  if (!b) return "–";
  let t = `${b.inFlight} in flight, ${b.waitingForLimit} waiting for a limit, ${b.waitingForRetry} for a retry, ${b.paused} paused`;
  if (b.waitingForLimit) t += `; oldest waiting ${b.oldestWaitingAge}`;
  return b.truncated ? t + " (at least)" : t;
}

function retryText(r) {
  if (!r || !r.maxAttempts) return "–";
  return `${r.maxAttempts}× ${r.initialBackoff}…${r.maxBackoff}, ${r.attemptTimeout} each`;
}

// limitsText prints a registration's flow-control fields.
function limitsText(s) {
  const l = s.limits || {};
  const parts = [];
  if (l.concurrency) parts.push(`${l.concurrency} in flight`);
  if (l.ratePerSecond) parts.push(`${l.ratePerSecond}/s` + (l.burst ? ` (burst ${l.burst})` : ""));
  if (s.perKeyConcurrency) parts.push(`${s.perKeyConcurrency} per key`);
  const handlers = Object.keys(s.handlerConfig || {});
  if (handlers.length) parts.push(`overrides: ${handlers.sort().join(", ")}`);
  return parts.join(", ") || "–";
}

// limitsRequest is the form's limits, undefined when none is given.
function limitsRequest() {
  const l = {};
  for (const [k, sel] of [["concurrency", "#svc-concurrency"], ["ratePerSecond", "#svc-rate"], ["burst", "#svc-burst"]]) {
    if ($(sel).value) l[k] = Number($(sel).value);
  }
  return Object.keys(l).length ? l : undefined;
}

function listField(sel) { return $(sel).value.split(",").map(h => h.trim()).filter(Boolean); }

// retryRequest is the form's retry policy, undefined when every field is
// empty (the cluster's defaults apply).
function retryRequest() {
  const r = {};
  if ($("#svc-max-attempts").value) r.maxAttempts = Number($("#svc-max-attempts").value);
  for (const [k, sel] of [["initialBackoff", "#svc-initial-backoff"], ["maxBackoff", "#svc-max-backoff"], ["attemptTimeout", "#svc-attempt-timeout"]]) {
    if ($(sel).value.trim()) r[k] = $(sel).value.trim();
  }
  return Object.keys(r).length ? r : undefined;
}

$("#svc-form").addEventListener("submit", ev => {
  ev.preventDefault();
  run("register", async () => {
    const name = $("#svc-name").value.trim();
    const body = { url: $("#svc-url").value.trim(), handlers: listField("#svc-handlers"), kind: $("#svc-kind").value };
    const shared = listField("#svc-shared");
    if (shared.length) body.shared = shared;
    const retry = retryRequest();
    if (retry) body.retry = retry;
    const limits = limitsRequest();
    if (limits) body.limits = limits;
    if ($("#svc-per-key").value) body.perKeyConcurrency = Number($("#svc-per-key").value);
    if ($("#svc-callback-url").value.trim()) body.callbackUrl = $("#svc-callback-url").value.trim();
    await api("PUT", "/services/" + encodeURIComponent(name), body);
    $("#svc-form").reset();
    await loadServices();
  });
});

// The list is this node's replica of the registry, which may trail a
// registration made through the metadata group's leader by a moment:
// refreshed every 2 s.
function showServices() {
  $("#view-services").hidden = false;
  run("services", loadServices);
  timers.push(setInterval(() => run("services", loadServices), 2000));
}

// ---------------------------------------------------------------- schedules

async function loadSchedules() {
  const l = await api("GET", "/schedules");
  const act = (s, action) => el("button", {
    type: "button", "data-action": action,
    onclick: () => run(action, async () => { await api("POST", `/schedules/${encodeURIComponent(s.id)}/${action}`); await loadSchedules(); }),
  }, action);
  fill($("#schedules tbody"), l.schedules.map(s => el("tr", { "data-schedule": s.id },
    el("td", {}, s.id),
    el("td", {}, s.target),
    el("td", { class: "mono" }, (s.every ? `every ${s.every}` : `${s.cron} ${s.timeZone || "UTC"}`) +
      (s.start ? ` from ${s.start}` : "") + (s.end ? ` until ${s.end}` : "")),
    el("td", {}, s.overlap),
    el("td", { "data-field": "state" }, s.paused ? "paused" : s.ended ? "ended" : "active"),
    el("td", {}, localTime(s.nextRun)),
    el("td", {}, s.lastInvocationId ? el("a", { href: "#/invocations/" + s.lastInvocationId }, localTime(s.lastRun)) : "–"),
    el("td", { "data-field": "runs" }, String(s.runs)),
    el("td", { "data-field": "skipped" }, String(s.skipped)),
    el("td", {}, act(s, s.paused ? "resume" : "pause"), act(s, "trigger"), el("button", {
      type: "button", class: "danger", "data-remove": s.id,
      onclick: () => run("remove", async () => {
        if (!confirm(`Delete schedule ${s.id}?`)) return;
        await api("DELETE", "/schedules/" + encodeURIComponent(s.id));
        await loadSchedules();
      }),
    }, "Remove")))));
  if (l.schedules.length === 0) {
    fill($("#schedules tbody"), [el("tr", {}, el("td", { colspan: 10, class: "muted" }, "no schedules"))]);
  }
}

$("#sch-form").addEventListener("submit", ev => {
  ev.preventDefault();
  run("schedule", async () => {
    const body = { target: $("#sch-target").value.trim(), overlap: $("#sch-overlap").value };
    for (const [k, sel] of [["every", "#sch-every"], ["cron", "#sch-cron"], ["timeZone", "#sch-tz"], ["catchupWindow", "#sch-catchup"], ["jitter", "#sch-jitter"],
      ["start", "#sch-start"], ["end", "#sch-end"]]) {
      if ($(sel).value.trim()) body[k] = $(sel).value.trim();
    }
    if ($("#sch-body").value.trim()) body.body = JSON.parse($("#sch-body").value);
    await api("PUT", "/schedules/" + encodeURIComponent($("#sch-id").value.trim()), body);
    $("#sch-form").reset();
    await loadSchedules();
  });
});

// Next and last runs move every tick: refreshed every 2 s.
function showSchedules() {
  $("#view-schedules").hidden = false;
  run("schedules", loadSchedules);
  timers.push(setInterval(() => run("schedules", loadSchedules), 2000));
}

// ---------------------------------------------------------------- invocations

const filterFields = { status: "#f-status", service: "#f-service", handler: "#f-handler", key: "#f-key", objectKey: "#f-objkey", limit: "#f-limit" };

function toRFC3339(local) { return local ? new Date(local).toISOString() : ""; }
function toLocalInput(rfc) {
  if (!rfc) return "";
  const d = new Date(rfc);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
}

function filterQuery() {
  const q = new URLSearchParams();
  for (const [k, sel] of Object.entries(filterFields)) if ($(sel).value.trim()) q.set(k, $(sel).value.trim());
  if ($("#f-after").value) q.set("createdAfter", toRFC3339($("#f-after").value));
  if ($("#f-before").value) q.set("createdBefore", toRFC3339($("#f-before").value));
  return q;
}

$("#inv-filter").addEventListener("submit", ev => {
  ev.preventDefault();
  location.hash = "#/invocations?" + filterQuery().toString();
});

$("#id-form").addEventListener("submit", ev => {
  ev.preventDefault();
  location.hash = "#/invocations/" + encodeURIComponent($("#f-id").value.trim());
});

$("#key-form").addEventListener("submit", ev => {
  ev.preventDefault();
  const name = $("#k-service").value.trim(), key = $("#k-key").value.trim();
  run("key", async () => {
    const svc = await api("GET", "/services/" + encodeURIComponent(name));
    if (svc.kind === "service") throw new Error(`${name} is a plain service: only objects and workflows have keys`);
    location.hash = `#/${svc.kind === "workflow" ? "workflows" : "objects"}/${encodeURIComponent(name)}/${encodeURIComponent(key)}`;
  });
});

async function loadInvocations(q) {
  const l = await api("GET", "/invocations?" + q.toString());
  const rows = l.invocations.map(inv => el("tr", {
    class: "clickable", "data-id": inv.id,
    onclick: () => { location.hash = "#/invocations/" + inv.id; },
  },
  el("td", { class: "mono" }, el("a", { href: "#/invocations/" + inv.id }, inv.id)),
  el("td", {}, statusBadge(inv.status, inv.failed, inv.heldBy)),
  el("td", {}, target(inv)),
  el("td", { class: "mono" }, dash(inv.idempotencyKey)),
  el("td", {}, String(inv.attempts)),
  el("td", {}, localTime(inv.acceptedAt)),
  el("td", {}, inv.status === "completed" ? String(inv.resultStatus) : "–"),
  el("td", {}, String(inv.partition))));
  if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no invocations match on this page")));
  fill($("#invocations tbody"), rows);
  $("#inv-page").textContent = `${l.invocations.length} shown · ${l.scanned} index entries looked at` +
    (l.nextCursor ? " · older ones may match: see Older" : " · end of the listing");
  const next = $("#inv-next");
  next.hidden = !l.nextCursor;
  next.onclick = () => {
    const nq = new URLSearchParams(q);
    nq.set("cursor", l.nextCursor);
    location.hash = "#/invocations?" + nq.toString();
  };
  const first = $("#inv-first");
  first.hidden = !q.has("cursor");
  first.onclick = () => {
    const nq = new URLSearchParams(q);
    nq.delete("cursor");
    location.hash = "#/invocations?" + nq.toString();
  };
}

function showInvocations(q) {
  $("#view-invocations").hidden = false;
  for (const [k, sel] of Object.entries(filterFields)) $(sel).value = q.get(k) || (k === "limit" ? "50" : "");
  $("#f-after").value = toLocalInput(q.get("createdAfter"));
  $("#f-before").value = toLocalInput(q.get("createdBefore"));
  run("invocations", () => loadInvocations(q));
  // New invocations and status changes show without a reload.
  timers.push(setInterval(() => run("invocations", () => loadInvocations(q)), 2000));
}

// ---------------------------------------------------------------- objects and workflows

async function loadKey(kind, service, key) {
  const path = `/objects/${encodeURIComponent(service)}/${encodeURIComponent(key)}`;
  const q = new URLSearchParams({ service, objectKey: key, limit: "50" });
  const [ks, l] = await Promise.all([api("GET", path), api("GET", "/invocations?" + q.toString())]);
  const root = $("#key-detail");
  $('[data-field="kind"]', root).textContent = kind === "workflow" ? "Workflow" : "Object";
  $('[data-field="service"]', root).textContent = service;
  $('[data-field="key"]', root).textContent = key;
  $('[data-field="partition"]', root).textContent = String(ks.partition);
  const running = $('[data-field="running"]', root);
  running.replaceChildren(ks.running ? el("a", { href: "#/invocations/" + ks.running, "data-id": ks.running }, ks.running) : "none");
  $('[data-field="queued"]', root).textContent = String(ks.queued);
  // A workflow's run is the invocation of its run handler for this id.
  const runRow = $('[data-row="run"]', root);
  runRow.hidden = kind !== "workflow";
  const wfRun = l.invocations.find(inv => inv.handler === "run");
  $('[data-field="run"]', root).replaceChildren(wfRun
    ? el("span", {}, statusBadge(wfRun.status, wfRun.failed), " ", el("a", { href: "#/invocations/" + wfRun.id, "data-id": wfRun.id }, wfRun.id),
      wfRun.status === "completed" ? ` · result ${wfRun.resultStatus}` : "")
    : "not started");
  const rows = l.invocations.map(inv => el("tr", { class: "clickable", "data-id": inv.id, onclick: () => { location.hash = "#/invocations/" + inv.id; } },
    el("td", { class: "mono" }, el("a", { href: "#/invocations/" + inv.id }, inv.id)),
    el("td", {}, statusBadge(inv.status, inv.failed)),
    el("td", {}, inv.handler),
    el("td", {}, String(inv.attempts)),
    el("td", {}, localTime(inv.acceptedAt)),
    el("td", {}, inv.status === "completed" ? String(inv.resultStatus) : "–")));
  if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: 6, class: "muted" }, "no invocations of this key")));
  fill($("#key-invocations tbody"), rows);
}

function showKey(kind, service, key) {
  $("#view-key").hidden = false;
  const load = () => run("key", () => loadKey(kind, service, key));
  load();
  timers.push(setInterval(load, 2000));
}

// target names what an invocation calls as its ingress path does.
function target(inv) {
  const t = inv.key ? `${inv.service} / ${inv.key} / ${inv.handler}` : `${inv.service} / ${inv.handler}`;
  return inv.scope ? `${t} · scope ${inv.scope}` : t;
}

function bodyText(b) {
  if (!b || b.bodyBytes === 0) return "(empty)";
  return b.body !== undefined ? b.body : "(binary, base64) " + (b.bodyBase64 || "");
}

function bodyMeta(b) {
  if (!b) return "";
  let s = `${b.bodyBytes} bytes` + (b.contentType ? `, ${b.contentType}` : "");
  if (b.bodyTruncated) s += " · truncated: first part shown";
  return s;
}

async function loadInvocation(id, full) {
  const v = await api("GET", "/invocations/" + encodeURIComponent(id) + (full ? "?full=true" : ""));
  const root = $("#inv-detail");
  $('[data-field="id"]', root).textContent = v.id;
  const node = (clusterCache?.nodes || []).find(n => n.id === v.leader);
  const leader = v.leader ? `node ${v.leader}` + (node?.adminAddr ? ` (admin ${node.adminAddr})` : "") : "none known";
  const r = v.result;
  const rows = [
    ["status", statusBadge(v.status, r?.failed)],
    ["service / handler", target(v)],
    ["idempotency key", dash(v.idempotencyKey)],
    ["scope", dash(v.scope)],
    ...(v.priority ? [["priority", String(v.priority)]] : []),
    ...(v.heldBy ? [["held by", v.heldBy]] : []),
    ["partition", `${v.partition} · leader: ${leader}`],
    ...(v.queuePosition !== undefined ? [["queue position", `${v.queuePosition} ahead of it`]] : []),
    ["attempts", String(v.attempts)],
    ["last error", dash(v.lastError)],
    ["accepted", localTime(v.acceptedAt)],
    ["execution time", localTime(v.executionTime)],
    ["next retry", localTime(v.nextRetryAt)],
    ["completed", localTime(v.completedAt)],
    ["result", r ? `${r.status}${r.failed ? " failed" : ""}${r.error ? ": " + r.error : ""}` : "–"],
    ...(v.restartedAs ? [["restarted as", el("a", { href: "#/invocations/" + v.restartedAs }, v.restartedAs)]] : []),
    ...(v.restartedFrom ? [["restarted from", el("a", { href: "#/invocations/" + v.restartedFrom }, v.restartedFrom)]] : []),
    ...(v.url ? [["delivered to", v.url]] : []),
  ];
  fill($("table.fields tbody", root), rows.map(([k, val]) =>
    el("tr", { "data-row": k }, el("th", {}, k), el("td", {}, val))));
  $('[data-field="request-meta"]', root).textContent = bodyMeta(v.request);
  $('[data-field="request-body"]', root).textContent = bodyText(v.request);
  $('[data-field="result-meta"]', root).textContent = r ? bodyMeta(r) : "no result yet";
  $('[data-field="result-body"]', root).textContent = r ? bodyText(r) : "";
  const link = $("#full-link");
  link.hidden = full || !(v.request?.bodyTruncated || r?.bodyTruncated);
  link.href = `#/invocations/${v.id}?full=true`;
  const cancel = $("#cancel-btn");
  cancel.hidden = v.status === "completed";
  cancel.onclick = () => {
    $("#confirm-id").textContent = v.id;
    $("#confirm-cancel").showModal();
  };
  // Operators' actions, each where it applies (docs/operations.md).
  const applies = {
    resume: v.status === "paused" || (v.status === "pending" && !!v.nextRetryAt && v.attempts > 0),
    restart: (v.status === "completed" || v.status === "paused") && !v.restartedAs,
    kill: v.status !== "completed",
    purge: v.status === "completed",
  };
  for (const b of document.querySelectorAll("#inv-detail .action-btn")) {
    b.hidden = !applies[b.dataset.action];
    b.onclick = () => confirmAction(b.dataset.action, v.id);
  }
  $("#inv-refresh").textContent = v.status === "completed" ? "" : "refreshed every 2 s until it completes";
  return v.status;
}

$("#confirm-cancel").addEventListener("close", () => {
  const dlg = $("#confirm-cancel");
  if (dlg.returnValue !== "yes") return;
  const id = $("#confirm-id").textContent;
  run("cancel", async () => {
    await api("DELETE", "/invocations/" + encodeURIComponent(id));
    await loadInvocation(id, false);
  });
});

const actionTexts = {
  resume: ["Resume", "It is delivered now and its attempts start again; give a URL to deliver it elsewhere from now on."],
  restart: ["Restart", "A new invocation runs with the same input (a paused original completes as killed)."],
  kill: ["Kill", "It completes now with a killed result (409), without calling its service again. This cannot be undone."],
  purge: ["Purge", "Its record and result are dropped now; its idempotency key becomes free. This cannot be undone."],
};

function confirmAction(action, id) {
  const [verb, text] = actionTexts[action];
  $("#action-verb").textContent = verb;
  $("#action-id").textContent = id;
  $("#action-text").textContent = text;
  $("#action-url-row").hidden = action !== "resume";
  $("#action-url").value = "";
  $("#action-yes").textContent = verb;
  const dlg = $("#confirm-action");
  dlg.dataset.action = action;
  dlg.showModal();
}

$("#confirm-action").addEventListener("close", () => {
  const dlg = $("#confirm-action");
  if (dlg.returnValue !== "yes") return;
  const action = dlg.dataset.action, id = $("#action-id").textContent;
  const url = $("#action-url").value.trim();
  run(action, async () => {
    const v = await api("POST", `/invocations/${encodeURIComponent(id)}/${action}`,
      action === "resume" && url ? { url } : undefined);
    if (action === "restart") location.hash = "#/invocations/" + v.id;
    else if (action === "purge") location.hash = "#/invocations";
    else await loadInvocation(id, false);
  });
});

function showInvocation(id, q) {
  $("#view-invocation").hidden = false;
  const full = q.get("full") === "true";
  run("invocation", () => loadInvocation(id, full));
  // Until it completes, its status, attempts and result show as they change.
  const timer = setInterval(() => run("invocation", async () => {
    if (await loadInvocation(id, full) === "completed") clearInterval(timer);
  }), 2000);
  timers.push(timer);
}

// ---------------------------------------------------------------- start

async function start() {
  $("#token-change").hidden = false;
  $("#node-label").textContent = location.host;
  route();
}
start();
