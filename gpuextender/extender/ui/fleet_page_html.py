"""The fleet page itself: one self-contained HTML document (inline CSS and JS, no build
step, no CDN, no web fonts: it works in an air-gapped cluster). Served by fleet_page.py,
which sets `data-base` (the --path-prefix) on <html> and a Content-Security-Policy
that allows exactly this script and style (by their hashes) and requests to the
extender itself.

The script fetches `ui/fleet.json` every few seconds and updates the rows in place
(no reload), `ui/history.json` every 30 s for the chart of the last 24 hours (SVG drawn by the
script), and posts the form's YAML to `ui/explain`. Everything from the server is
put into the page as text (textContent, attributes), never parsed as HTML.
"""

from __future__ import annotations

STYLE = """
:root { --free-idle:#2e9d4f; --free-busy:#d4a20a; --allocated-busy:#2f6fd6; --allocated-idle:#9b59b6;
  --degraded:#e67e22; --unhealthy:#c0392b; --unknown:#8c8c8c; }
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1rem 1.5rem; color: #222; }
h1 { font-size: 1.4rem; margin: 0 0 .3rem; } h2 { font-size: 1.1rem; margin: 1.2rem 0 .3rem; }
.muted { color: #666; } .warn { color: #a33; font-weight: 600; }
#status.bad { color: #a33; font-weight: 600; }
.legend, .counts { display: flex; flex-wrap: wrap; gap: .4rem 1rem; margin: .3rem 0; }
.legend span, .counts span { display: inline-flex; align-items: center; gap: .3rem; }
.swatch { display: inline-block; width: 14px; height: 14px; border-radius: 3px; }
.cell { display: inline-block; width: 30px; height: 22px; margin: 1px; border-radius: 3px; color: #fff;
  font-size: 11px; line-height: 22px; text-align: center; vertical-align: middle; font-variant-numeric: tabular-nums; }
.s-free-idle { background: var(--free-idle); } .s-free-busy { background: var(--free-busy); color: #222; }
.s-allocated-busy { background: var(--allocated-busy); } .s-allocated-idle { background: var(--allocated-idle); }
.s-degraded { background: var(--degraded); } .s-unhealthy { background: var(--unhealthy); }
.s-unknown { background: repeating-linear-gradient(45deg, #8c8c8c 0 4px, #b5b5b5 4px 8px); color: #222; }
/* State by pattern as well as colour: a busy GPU carries a dark bar at its foot, an allocated one a
   ring, an unhealthy one a cross-hatch, a degraded one dots; unknown and holder-unknown are striped. */
.s-free-busy, .s-allocated-busy, .s-holder-unknown-busy { box-shadow: inset 0 -5px rgba(0,0,0,.45); }
.s-allocated-idle { box-shadow: inset 0 0 0 2px rgba(255,255,255,.85); }
.s-allocated-busy { box-shadow: inset 0 0 0 2px rgba(255,255,255,.85), inset 0 -5px rgba(0,0,0,.45); }
.s-unhealthy { background-image: repeating-linear-gradient(45deg, rgba(255,255,255,.55) 0 2px, transparent 2px 6px),
  repeating-linear-gradient(-45deg, rgba(255,255,255,.55) 0 2px, transparent 2px 6px); }
.s-degraded { background-image: radial-gradient(rgba(0,0,0,.45) 1.5px, transparent 1.6px); background-size: 6px 6px; }
.controls { display: flex; flex-wrap: wrap; gap: .4rem 1rem; align-items: center; margin: .6rem 0; }
.controls input[type=search] { width: 16rem; }
.dense .node { display: inline-flex; border: 0; padding: 0 3px 2px 0; gap: 0; }
.dense .node .name, .dense .node .info { display: none; }
.dense .cell { width: 7px; height: 7px; margin: 0 1px 0 0; font-size: 0; line-height: 0; border-radius: 1px; }
.dense .s-free-busy, .dense .s-allocated-busy, .dense .s-holder-unknown-busy { box-shadow: inset 0 -2px rgba(0,0,0,.5); }
.dense .s-allocated-idle, .dense .s-allocated-busy { box-shadow: inset 0 0 0 1px rgba(255,255,255,.9); }
#waiting table td.reasons { max-width: 40rem; }
.s-holder-unknown-idle { background: repeating-linear-gradient(135deg, var(--free-idle) 0 5px, #8c8c8c 5px 8px); }
.s-holder-unknown-busy { background: repeating-linear-gradient(135deg, var(--free-busy) 0 5px, #8c8c8c 5px 8px); color: #222; }
.page-stale .cell { opacity: .35; }
.node { display: flex; align-items: center; gap: .6rem; padding: 2px 0; border-bottom: 1px solid #eee; }
.node .name { width: 16rem; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; font-family: ui-monospace, monospace; }
.node .info { width: 16rem; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; font-size: 12px; color: #666; }
textarea { width: 100%; max-width: 60rem; height: 12rem; font-family: ui-monospace, monospace; font-size: 12px; }
table { border-collapse: collapse; margin-top: .5rem; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; font-size: 13px; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.fail td.result { color: #a33; } tr.pass td.result { color: #2e7d32; font-weight: 600; }
section.fleet { margin-bottom: 1rem; }
#history-chart { display: block; width: 100%; max-width: 60rem; height: auto; } #history-chart.empty { display: none; }
#history-chart .h-line { fill: none; stroke-width: 2; stroke-linecap: round; stroke-linejoin: round; }
/* Each series by dash as well as colour; a lone point (a minute between two gaps) is a round dot. */
#history-chart .h-free-idle { stroke: var(--free-idle); }
#history-chart .h-holder-unknown-idle { stroke: #8c8c8c; stroke-dasharray: 4 2; }
#history-chart .h-allocated-idle { stroke: var(--allocated-idle); stroke-dasharray: 8 3; }
#history-chart .h-unhealthy { stroke: var(--unhealthy); stroke-dasharray: 2 3; }
#history-chart .h-waiting { stroke: #222; stroke-dasharray: 10 3 2 3; }
#history-chart .h-axis { stroke: #bbb; stroke-width: 1; }
#history-chart .h-label { font-size: 11px; fill: #666; }
.h-key { display: inline-block; width: 22px; height: 0; border-top: 3px solid; vertical-align: middle; }
.h-key.h-free-idle { border-color: var(--free-idle); } .h-key.h-allocated-idle { border-color: var(--allocated-idle); border-top-style: dashed; }
.h-key.h-holder-unknown-idle { border-color: #8c8c8c; border-top-style: dashed; }
.h-key.h-unhealthy { border-color: var(--unhealthy); border-top-style: dotted; } .h-key.h-waiting { border-color: #222; border-top-style: dashed; }
"""

SCRIPT = r"""
"use strict";
const BASE = document.documentElement.dataset.base || "";
const REFRESH_MS = 3000;
const DENSE_FROM = 200;  // nodes: from here the page opens dense (one 7-px square per GPU)
const HISTORY_MS = 30000;  // the history gains a point a minute
const $ = (id) => document.getElementById(id);
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
let lastOk = 0, staleAfterMs = 10000, states = [], stateText = [], lastDoc = null, autoDense = true;
// A row is a problem when its data is not fresh or a GPU on it is unhealthy, degraded, unknown or
// held by a pod and idle (the "problems only" filter).
const PROBLEM_STATES = new Set(["unhealthy", "degraded", "unknown", "allocated-idle"]);
const sections = new Map();  // class key -> {section, head, counts, rows}
const rows = new Map();      // class key + NUL + node -> {el, sig}

function countsLine(target, counts) {
  target.replaceChildren();
  states.forEach((s) => {
    const n = counts[s] || 0;
    const span = el("span"); span.dataset.state = s; span.dataset.count = n;
    span.append(el("i", "swatch s-" + s), el("b", null, n), el("span", null, s));
    target.append(span);
  });
}

function cellTitle(row, cell) {
  const [index, code, util, mem, why, heldBy, sm] = cell;
  const parts = [row.node + " GPU " + index, stateText[code] || states[code]];
  if (why) parts.push("why: " + why);
  if (heldBy) parts.push("held by a pod of " + heldBy);
  if (row.data === "fresh") {
    if (sm !== undefined && sm !== null) {
      parts.push("judged by SM activity: " + sm + " % of SMs busy (utilization " + (util === null ? "not reported" : util + " %") + ", not used)");
    } else if (states[code] !== "unhealthy") {
      parts.push("judged by utilization: " + (util === null ? "not reported" : util + " %"));
    } else {
      parts.push("utilization " + (util === null ? "not reported" : util + " %"));
    }
    if (mem === null) parts.push("memory not reported");
    else if (row.gpuMemoryGiB) parts.push("memory " + mem + " % of " + row.gpuMemoryGiB + " GiB (" + (row.gpuMemoryGiB * mem / 100).toFixed(1) + " GiB used)");
    else parts.push("memory " + mem + " %");
  } else if (row.data === "stale") {
    parts.push("last report " + row.ageSeconds + " s ago (older than --stale-after)");
  } else {
    parts.push("no report from the node's agent");
  }
  return parts.join(" · ");
}

function buildRow(row) {
  const line = el("div", "node"); line.dataset.node = row.node; line.dataset.data = row.data;
  const name = el("span", "name", row.node);
  const info = el("span", "info", [row.model || "", row.data === "fresh" ? "" : row.data === "stale" ? "stale data" : "no data",
    row.error ? "NVML: " + row.error : "",
    row.published && row.published.condition && row.published.condition.status === "False" ? "no usable GPU (GPUsUsable=False)" : ""].filter(Boolean).join(" · "));
  line.append(name, info);
  const cells = el("span", "cells");
  row.gpus.forEach((cell) => {
    const s = states[cell[1]];
    const bySm = row.data === "fresh" && cell[6] !== undefined && cell[6] !== null;
    const shown = bySm ? Math.round(cell[6]) : cell[2];  // the reading that judged it
    const text = s === "unhealthy" ? "✕" : row.data === "fresh" && shown !== null ? shown : (s === "unknown" ? "?" : "–");
    const c = el("span", "cell s-" + s, text);
    c.dataset.gpu = cell[0]; c.dataset.state = s; c.title = cellTitle(row, cell);
    if (row.data === "fresh" && s !== "unhealthy") c.dataset.rule = bySm ? "sm-active" : "utilization";
    c.setAttribute("aria-label", c.title);
    cells.append(c);
  });
  line.append(cells);
  return line;
}

function nodeTitle(row) {
  const parts = [row.node, "data " + row.data + (row.ageSeconds === null ? "" : " (" + row.ageSeconds + " s old)")];
  if (row.allocation) parts.push("allocation: " + row.allocation);
  if (row.dra) parts.push("DRA: " + row.dra.devices + " GPUs, " + row.dra.claimed + " claimed, " + row.dra.tainted + " tainted");
  if (row.published) {
    const t = Object.entries(row.published.taints).map(([d, k]) => d + " " + k);
    if (t.length) parts.push("published taints: " + t.join(", "));
    if (row.published.condition) parts.push("GPUsUsable=" + row.published.condition.status + ": " + row.published.condition.message);
  }
  if (row.allocatedIdleByNamespace) parts.push("allocated-idle by namespace: " +
    Object.entries(row.allocatedIdleByNamespace).map(([k, v]) => k + " " + v).join(", "));
  return parts.join(" · ");
}

function render(doc) {
  states = doc.states; stateText = doc.stateText; staleAfterMs = doc.staleAfterSeconds * 1000;
  if (!$("legend").childElementCount) {
    states.forEach((s, i) => {
      const span = el("span"); span.dataset.state = s; span.title = stateText[i];
      span.append(el("i", "swatch s-" + s), el("span", null, stateText[i]));
      $("legend").append(span);
    });
  }
  const sm = doc.idleRule.maxSmActivePercent;
  $("rule").textContent = "idle = " + (sm === null ? "" : "SM activity < " + sm + " % where the GPU reports it (the cell shows it), else ") +
    "utilization < " + doc.idleRule.maxUtilizationPercent + " %, and memory used < " +
    doc.idleRule.maxMemoryUsedPercent + " %; data older than " + doc.staleAfterSeconds + " s is stale (unknown).";
  const t = doc.totals;
  $("totals-head").textContent = t.nodes + " GPU node(s), " + t.gpus + " GPU(s)";
  countsLine($("totals"), t.counts);
  const seenSections = new Set(), seenRows = new Set();
  const order = [];
  doc.classes.forEach((g) => {
    const key = g.class === null ? "\u0000unclassified" : g.class;
    seenSections.add(key);
    let s = sections.get(key);
    if (!s) {
      s = { section: el("section", "fleet"), head: el("h2"), counts: el("div", "counts"), rows: el("div", "rows") };
      s.section.dataset.class = g.class === null ? "" : g.class;
      s.section.append(s.head, s.counts, s.rows);
      sections.set(key, s);
    }
    s.head.textContent = (g.class === null ? "Unclassified (no AcceleratorClass)" : "AcceleratorClass " + g.class) +
      " — " + g.nodes + " node(s), " + g.gpus + " GPU(s)";
    countsLine(s.counts, g.counts);
    const els = arrange(g.rows).map((row) => {
      const rk = key + "\u0000" + row.node;
      seenRows.add(rk);
      const sig = JSON.stringify([row.data, row.gpus, row.model, row.error, row.gpuMemoryGiB, row.dra, row.published]);
      let r = rows.get(rk);
      if (!r || r.sig !== sig) { r = { el: buildRow(row), sig }; rows.set(rk, r); }
      r.el.firstChild.title = nodeTitle(row);
      return r.el;
    });
    s.rows.replaceChildren(...els);
    order.push(s.section);
  });
  for (const k of [...sections.keys()]) if (!seenSections.has(k)) sections.delete(k);
  for (const k of [...rows.keys()]) if (!seenRows.has(k)) rows.delete(k);
  $("fleet").replaceChildren(...order);
  renderWaiting(doc.waiting || []);
  renderDomains(doc.domains || { level: "", domains: [] });
}

// Multi-pod groups' domains (the first --group-topology-levels label): free idle GPUs, groups held.
function renderDomains(d) {
  const out = $("domains");
  $("domains-head").textContent = "Domains by " + (d.level || "label") + " (" + d.domains.length + ")";
  if (!d.domains.length) { out.replaceChildren(el("p", "muted", "No GPU node carries the label.")); return; }
  const table = el("table"); table.id = "domains-table";
  const hr = el("tr");
  ["domain", "nodes", "free idle GPUs", "idle, holder unknown", "groups held there (members not yet bound)"].forEach((h) => hr.append(el("th", null, h)));
  table.append(el("thead")); table.firstChild.append(hr);
  const body = el("tbody");
  d.domains.forEach((x) => {
    const tr = el("tr"); tr.dataset.domain = x.domain;
    td(tr, x.domain, "domain");
    td(tr, x.nodes, "num");
    td(tr, x.freeIdleGpus + " of " + x.gpus, "num free-idle");
    td(tr, x.holderUnknownIdleGpus, "num holder-unknown-idle");
    td(tr, x.groupsHeld.map((g) => g.group + " (" + g.membersHeld + ")").join("; ") || "-", "groups");
    body.append(tr);
  });
  table.append(body);
  out.replaceChildren(table);
}

function isProblem(row) {
  return row.data !== "fresh" || row.gpus.some((cell) => PROBLEM_STATES.has(states[cell[1]]));
}

// Idle GPUs a pod could get, as the decision counts them: the document's idleStates (fleet_view.idle_counts).
function idleCount(row) {
  const idle = new Set(lastDoc ? lastDoc.idleStates : []);
  return row.gpus.filter((cell) => idle.has(states[cell[1]])).length;
}

// The rows the controls let through, in the order they ask for.
function arrange(list) {
  const needle = $("search").value.trim().toLowerCase();
  const problemsOnly = $("problems").checked;
  let out = list.filter((row) => (!needle || row.node.toLowerCase().includes(needle)) && (!problemsOnly || isProblem(row)));
  const by = $("sort").value;
  if (by === "idle") out = [...out].sort((a, b) => idleCount(b) - idleCount(a) || a.node.localeCompare(b.node));
  else if (by === "problems") out = [...out].sort((a, b) => Number(isProblem(b)) - Number(isProblem(a)) || a.node.localeCompare(b.node));
  return out;
}

function renderWaiting(list) {
  const out = $("waiting");
  $("waiting-head").textContent = "Pods waiting for GPUs (" + list.length + ")";
  if (!list.length) { out.replaceChildren(el("p", "muted", "None: the latest filter call of every GPU pod found it a node.")); return; }
  const table = el("table"); table.id = "waiting-table";
  const hr = el("tr");
  ["pod", "GPUs", "waiting", "verdict", "why, over the nodes asked"].forEach((h) => hr.append(el("th", null, h)));
  table.append(el("thead")); table.firstChild.append(hr);
  const body = el("tbody");
  list.forEach((w) => {
    const tr = el("tr"); tr.dataset.pod = w.pod;
    td(tr, w.pod, "pod");
    td(tr, w.gpus, "num");
    td(tr, w.waitingSeconds + " s (" + w.filterCalls + " filter call(s), last " + w.lastFilterSecondsAgo + " s ago)", "num");
    td(tr, w.verdict, "verdict");
    td(tr, w.reasons.map((r) => r.code + ": " + r.sentence + " (" + r.nodes + " of " + w.nodes + " nodes)").join("; "), "reasons");
    body.append(tr);
  });
  table.append(body);
  out.replaceChildren(table);
}

function controlsChanged() {
  if (lastDoc) { const t0 = performance.now(); render(lastDoc); document.body.dataset.filterMs = (performance.now() - t0).toFixed(1); }
}
["search", "problems", "sort"].forEach((id) => ["input", "change"].forEach((ev) => $(id).addEventListener(ev, controlsChanged)));
$("dense").addEventListener("input", () => { autoDense = false; document.body.classList.toggle("dense", $("dense").checked); });

async function refresh() {
  try {
    const r = await fetch(BASE + "/ui/fleet.json", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    const t0 = performance.now();
    lastDoc = await r.json();
    if (autoDense && lastDoc.totals.nodes > DENSE_FROM) { $("dense").checked = true; document.body.classList.add("dense"); }
    autoDense = false;
    render(lastDoc);
    document.body.dataset.renderMs = (performance.now() - t0).toFixed(1);  // parse + render, for bench/
    document.body.dataset.renders = String(Number(document.body.dataset.renders || 0) + 1);
    lastOk = Date.now();
    $("status").className = "";
    $("status").textContent = "updated " + new Date(lastOk).toLocaleTimeString() + " (every " + REFRESH_MS / 1000 + " s)";
    document.body.classList.remove("page-stale");
  } catch (err) {
    $("status").className = "bad";
    $("status").textContent = "cannot refresh (" + err.message + ")" + (lastOk ? "; showing data from " + new Date(lastOk).toLocaleTimeString() : "");
    if (!lastOk || Date.now() - lastOk > staleAfterMs) document.body.classList.add("page-stale");
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

// The last 24 hours (ui/history.json): one point a minute, a line per series. A minute without a
// point (not sampled) or with a null (no GPU had data) breaks the line: a gap, never a zero.
// The series are the document's (state/fleet_history.SERIES), in its order; their names here.
const SERIES_TEXT = { "free-idle": "free-idle GPUs", "holder-unknown-idle": "idle GPUs, holder unknown",
  "allocated-idle": "allocated-idle GPUs", "unhealthy": "unhealthy GPUs", "waiting": "pods waiting for GPUs" };
const H = { w: 760, h: 190, left: 44, right: 12, top: 10, bottom: 24 };
function svgEl(tag, attrs, text) {
  const e = document.createElementNS($("history-chart").namespaceURI, tag);
  Object.entries(attrs || {}).forEach(([k, v]) => e.setAttribute(k, String(v)));
  if (text !== undefined) e.textContent = String(text);
  return e;
}
function clock(t) { return new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }); }

function renderHistory(h) {
  const chart = $("history-chart"), points = h.points, step = h.stepSeconds;
  chart.dataset.points = points.length;
  $("history-head").textContent = "The last 24 hours (" + points.length + " minute(s) of " + h.maxPoints + ")";
  if (!points.length) {
    chart.replaceChildren(); chart.classList.add("empty"); $("history-legend").replaceChildren();
    $("history-note").textContent = "No history yet: the extender records the fleet once a minute.";
    return;
  }
  chart.classList.remove("empty");
  $("history-note").textContent = "One point a minute. A gap: the extender had no data that minute (not running, or no GPU reporting); never drawn as zero.";
  const t0 = points[0][0], t1 = Math.max(points[points.length - 1][0], t0 + step);
  let top = 1;
  points.forEach((p) => { for (let k = 1; k < p.length; k++) if (p[k] !== null && p[k] > top) top = p[k]; });
  const x = (t) => H.left + (t - t0) / (t1 - t0) * (H.w - H.left - H.right);
  const y = (v) => H.h - H.bottom - v / top * (H.h - H.top - H.bottom);
  const kids = [svgEl("line", { class: "h-axis", x1: H.left, x2: H.w - H.right, y1: y(0), y2: y(0) }),
    svgEl("line", { class: "h-axis", x1: H.left, x2: H.left, y1: H.top, y2: y(0) }),
    svgEl("text", { class: "h-label", x: H.left - 4, y: y(0) + 4, "text-anchor": "end" }, 0),
    svgEl("text", { class: "h-label", x: H.left - 4, y: y(top) + 4, "text-anchor": "end" }, top)];
  // At most 5 time labels, each a different minute: a short history has fewer (never two on one spot).
  const ticks = Math.min(5, Math.round((t1 - t0) / step) + 1);
  for (let i = 0; i < ticks; i++) {
    const t = t0 + Math.round((t1 - t0) * i / (ticks - 1) / step) * step;
    const label = svgEl("text", { class: "h-label h-tick", x: x(t), y: H.h - 6, "text-anchor": i === 0 ? "start" : i === ticks - 1 ? "end" : "middle" }, clock(t));
    label.dataset.time = t;
    kids.push(label);
  }
  const legend = [];
  h.series.forEach((name, i) => {
    const text = SERIES_TEXT[name] || name;
    const segments = [];
    let prev = null, latest = null;
    points.forEach((p) => {
      const v = p[i + 1];
      if (v === null) { prev = null; return; }
      if (prev === null || p[0] - prev > step) segments.push([]);
      segments[segments.length - 1].push(x(p[0]).toFixed(1) + " " + y(v).toFixed(1));
      prev = p[0]; latest = v;
    });
    // "M a L b L c" per run of minutes; a lone point "M a h0", which its round cap draws as a dot.
    const d = segments.map((run) => "M" + run.join(" L") + (run.length === 1 ? " h0" : "")).join(" ");
    const path = svgEl("path", { class: "h-line h-" + name, d: d });
    path.dataset.series = name;
    path.append(svgEl("title", {}, text + (latest === null ? "" : ", latest " + latest)));
    kids.push(path);
    const key = el("span"); key.dataset.series = name;
    key.append(el("i", "h-key h-" + name), el("span", null, text + (latest === null ? " (no data)" : ": " + latest)));
    legend.push(key);
  });
  chart.replaceChildren(...kids);
  $("history-legend").replaceChildren(...legend);
}

async function refreshHistory() {
  try {
    const r = await fetch(BASE + "/ui/history.json", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    renderHistory(await r.json());
  } catch (err) {
    $("history-note").textContent = "cannot refresh the history (" + err.message + ")";
  } finally {
    setTimeout(refreshHistory, HISTORY_MS);
  }
}

function td(tr, text, cls) { const c = el("td", cls, text === null || text === undefined ? "" : text); tr.append(c); return c; }

function renderExplain(answer) {
  const out = $("answer");
  out.replaceChildren();
  const head = el("p");
  head.append(el("b", null, answer.pod), el("span", null, " needs " + answer.gpusNeeded + " GPU(s)" +
    (Object.keys(answer.migDevicesNeeded || {}).length ? " and MIG " + JSON.stringify(answer.migDevicesNeeded) : "")));
  out.append(head);
  if (answer.input && answer.input.kind === "InferenceService") {
    out.append(el("p", "muted", "Explained as the " + answer.input.component + " pod OME creates for InferenceService " +
      answer.input.inferenceService + " (GPUs from " + answer.input.gpusFrom + ")" + (answer.input.note ? "; " + answer.input.note : "")));
  }
  const resolved = Object.entries(answer.resolved || {}).map(([k, v]) => k + ": " + (typeof v === "string" ? v : JSON.stringify(v)));
  if (resolved.length) out.append(el("p", "muted", resolved.join(" · ")));
  if (answer.fallback) out.append(el("p", "warn", "No node fits: the pass-all fallback lets kube-scheduler decide among the soft failures."));
  const table = el("table"); table.id = "answer-table";
  const hr = el("tr");
  ["#", "node", "result", "score", "reason", "classes", "idle / healthy / GPUs", "data"].forEach((h) => hr.append(el("th", null, h)));
  table.append(el("thead")); table.firstChild.append(hr);
  const body = el("tbody");
  answer.nodes.forEach((n, i) => {
    const tr = el("tr", n.result); tr.dataset.node = n.node;
    td(tr, i + 1, "num");
    td(tr, n.node, "node");
    td(tr, n.result + (n.shortlisted === false ? " (held back by --shortlist)" : "") + (n.assumedData ? " (assumed data)" : ""), "result");
    td(tr, n.score, "num score");
    td(tr, n.reasonCode ? n.reasonCode + ": " + n.reason : "", "reason");
    td(tr, n.classes.join(", "), "classes");
    const v = (x) => (x === null || x === undefined ? "?" : x);
    td(tr, v(n.idleGpus) + " / " + v(n.healthyGpus) + " / " + v(n.gpus), "num");
    td(tr, n.data + (n.dataAgeSeconds === null ? "" : " (" + n.dataAgeSeconds + " s)"), "data");
    body.append(tr);
  });
  table.append(body);
  out.append(table);
  if (answer.candidates) out.append(el("p", "muted", "Explained " + answer.candidates.explained + " of " + answer.candidates.known + " known node(s)."));
}

$("ask").addEventListener("submit", async (e) => {
  e.preventDefault();
  const out = $("answer");
  out.replaceChildren(el("p", "muted", "asking…"));
  try {
    const r = await fetch(BASE + "/ui/explain", { method: "POST", headers: { "Content-Type": "application/yaml" }, body: $("yaml").value });
    const answer = await r.json();
    if (!r.ok) { out.replaceChildren(el("p", "warn", "Refused (" + answer.reason + "): " + answer.error)); out.firstChild.id = "answer-error"; return; }
    renderExplain(answer);
  } catch (err) {
    out.replaceChildren(el("p", "warn", "Request failed: " + err.message));
  }
});

refresh();
refreshHistory();
"""

# {base} (the escaped path prefix) is filled in by fleet_page.page_html(); the rest is literal.
TEMPLATE = """<!doctype html>
<html lang="en" data-base="{base}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GPU fleet — gpu-extender</title>
<style>{style}</style>
</head>
<body>
<h1>GPU fleet</h1>
<p class="muted">Read-only view of what gpu-extender knows: every GPU node as a row of its GPUs, grouped by
AcceleratorClass. Hover a GPU for its readings. <span id="status">loading…</span></p>
<p class="muted" id="rule"></p>
<div class="legend" id="legend" aria-label="legend"></div>
<h2 id="waiting-head">Pods waiting for GPUs</h2>
<div id="waiting"></div>
<h2 id="history-head">The last 24 hours</h2>
<div class="legend" id="history-legend" aria-label="history legend"></div>
<svg id="history-chart" class="empty" viewBox="0 0 760 190" role="img" aria-label="free-idle, holder-unknown-idle, allocated-idle and unhealthy GPUs and pods waiting, a point a minute over the last 24 hours"></svg>
<p class="muted" id="history-note">loading…</p>
<h2 id="domains-head">Domains</h2>
<div id="domains"></div>
<h2 id="totals-head">All nodes</h2>
<div class="counts" id="totals"></div>
<div class="controls" role="search">
<label>node <input type="search" id="search" placeholder="name contains…" autocomplete="off"></label>
<label><input type="checkbox" id="problems"> problems only (unhealthy, degraded, unknown or stale, allocated-idle)</label>
<label>sort <select id="sort"><option value="name">by name</option><option value="idle">most free idle GPUs first</option>
<option value="problems">problems first</option></select></label>
<label><input type="checkbox" id="dense"> dense (a square per GPU; hover for its node and state)</label>
</div>
<div id="fleet"></div>
<h2>Where would this pod go?</h2>
<form id="ask">
<p class="muted">Paste a Pod or an OME InferenceService (YAML or JSON). The extender explains it over every known node,
as <code>POST /explain</code> does; nothing is created.</p>
<textarea id="yaml" name="yaml" spellcheck="false" placeholder="apiVersion: v1
kind: Pod
metadata: {{name: trial, namespace: default}}
spec:
  containers:
  - name: main
    resources: {{limits: {{nvidia.com/gpu: 1}}}}"></textarea><br>
<button type="submit" id="ask-button">Explain</button>
</form>
<div id="answer"></div>
<script>{script}</script>
</body>
</html>
"""
