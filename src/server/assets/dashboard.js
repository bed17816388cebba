// chorus dashboard: polls GET /v1/state about once a second and redraws. No libraries, no network
// beyond this server. Every string from the server (request text, document previews, ids) goes
// into the page through textContent or SVG/canvas drawing — never parsed as markup.
"use strict";

const POLL_MS = 1000;
const key = new URLSearchParams(location.hash.slice(1)).get("key") || "";
const $ = (id) => document.getElementById(id);

// A new element with text (textContent: user text stays text) and optional class/attributes.
function el(tag, text, cls, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  if (attrs) for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}
function svgEl(tag, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
}
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
function mib(b) {
  if (!(b >= 0)) return "–";
  if (b < 1024) return b + " B";
  if (b < 1 << 20) return (b / 1024).toFixed(1) + " KiB";
  if (b < 1 << 30) return (b / (1 << 20)).toFixed(1) + " MiB";
  return (b / (1 << 30)).toFixed(2) + " GiB";
}
function setBytes(id, b) {
  const e = $(id);
  e.textContent = mib(b);
  e.dataset.bytes = String(b);
  e.title = b + " bytes";
}

const BUDGET_PARTS = [
  ["pinned_bytes", "pinned contexts", "#6f42c1"],
  ["cached_bytes", "cached prefixes (idle)", "#2da44e"],
  ["in_use_bytes", "in use by running requests", "#0969da"],
  ["overhead_bytes", "store overhead", "#8c959f"],
  ["free_bytes", "free", "#eaeef2"],
];
const FORMAT_COLORS = {
  "f16": "#08306b", "q8": "#2171b5", "kivi4": "#41ab5d", "kivi3": "#a1d99b", "kivi2": "#e5f5e0",
  "tq4": "#fd8d3c", "tq3": "#f16913", "tq2": "#a63603", "polykv-paper": "#756bb1",
};
const CHUNK_COLORS = { "S": "#08306b", "F": "#2171b5", "4": "#41ab5d", "2": "#e5f5e0" };

function renderBudget(s) {
  const b = s.budget;
  const bar = $("budget-bar"), legend = $("budget-legend"), held = $("held-bar");
  clear(bar);
  clear(legend);
  clear(held);
  const total = b.budget_bytes > 0 ? b.budget_bytes : b.held_bytes || 1;
  for (const [k, label, color] of BUDGET_PARTS) {
    const v = b[k] || 0;
    if (k === "free_bytes" && b.budget_bytes === 0) continue;
    const seg = el("div", null, null, { "data-part": k, title: label + ": " + mib(v) });
    seg.style.width = (100 * v / total) + "%";
    seg.style.background = color;
    bar.appendChild(seg);
    if (k !== "free_bytes" && b.held_bytes > 0) {
      const h = el("div", null, null, { title: label + ": " + mib(v) });
      h.style.width = (100 * v / b.held_bytes) + "%";
      h.style.background = color;
      held.appendChild(h);
    }
    const item = el("span");
    const sw = el("span", null, "swatch");
    sw.style.background = color;
    item.appendChild(sw);
    item.appendChild(document.createTextNode(label + " " + mib(v)));
    legend.appendChild(item);
  }
  setBytes("held-bytes", b.held_bytes);
  setBytes("budget-bytes", b.budget_bytes);
  if (b.budget_bytes === 0) $("budget-bytes").textContent = "no budget";
  $("high-water").textContent = mib(b.high_water_bytes);
  setBytes("shared-bytes", b.shared_bytes);
  const f = s.fp16;
  $("fp16-figure").textContent = f.agents > 0
    ? `${f.agents} running agent${f.agents > 1 ? "s" : ""} as fp16 copies: ${mib(f.copies_bytes)} ` +
      `(${mib(f.per_agent_bytes)} each) — ${f.ratio.toFixed(1)}× what chorus holds`
    : "fp16 copies per agent: no running agents";
  $("running-count").textContent = String(s.counts.running);
  $("waiting-count").textContent = String(s.counts.waiting);
  $("context-count").textContent = String(s.counts.contexts);
}

// One line of a user's text for a table cell (still text: textContent), newlines shown as ⏎.
function oneLine(t) { return String(t).replace(/\r?\n/g, " \u23ce "); }

function row(cells) {
  const tr = el("tr");
  for (const [text, cls] of cells) tr.appendChild(el("td", text, cls));
  return tr;
}
function emptyRow(tbody, cols, text, id) {
  const tr = el("tr", null, "empty", { id });
  tr.appendChild(el("td", text, null, { colspan: cols }));
  tbody.appendChild(tr);
}

function renderRequests(s) {
  const tbody = $("requests").tBodies[0];
  clear(tbody);
  if (s.requests.length === 0) return emptyRow(tbody, 10, "no requests", "requests-empty");
  for (const r of s.requests) {
    // Reused segments: their tokens, and where each sits (prompt position, offset from where it was computed).
    const segs = (r.segments || []).map(g => `${g.tokens} @${g.at}${g.shift >= 0 ? "+" : ""}${g.shift}`).join(", ");
    const tr = row([[r.id], [r.state], [r.prompt_tokens, "num"], [r.cached_tokens, "num"],
      [r.reused_tokens ? `${r.reused_tokens} (${segs})` : "–", "num"], [r.tokens, "num"],
      [mib(r.private_bytes), "num"], [r.tok_s > 0 ? r.tok_s.toFixed(1) : "–", "num"], [r.age_s.toFixed(1) + " s", "num"],
      [oneLine(r.preview), "text"]]);
    tr.dataset.state = r.state;
    tbody.appendChild(tr);
  }
}

function renderRuns(s) {
  const tbody = $("runs").tBodies[0];
  clear(tbody);
  if (s.runs.length === 0) emptyRow(tbody, 7, "no shared blocks", "runs-empty");
  for (const r of s.runs) {
    const kind = r.context ? `${r.kind} ${r.context}` : r.kind;
    tbody.appendChild(row([[kind], [r.first_token, "num"], [r.tokens, "num"], [mib(r.bytes), "num"],
      [r.readers, "num"], [r.hits, "num"], [oneLine(r.preview), "text"]]));
  }
  $("runs-note").textContent = s.runs_total > s.runs.length
    ? `${s.runs_total - s.runs.length} smaller runs not listed` : "";
}

function drawGrid(rows, colors, cell, rowH) {
  const n = rows.length ? rows[0].length : 0;
  const c = el("canvas");
  c.width = Math.max(1, n * cell);
  c.height = Math.max(1, rows.length * rowH);
  const g = c.getContext("2d");
  rows.forEach((line, y) => {
    for (let x = 0; x < line.length; x++) {
      g.fillStyle = colors[line[x]] || "#ffffff";
      g.fillRect(x * cell, y * rowH, cell - (cell > 3 ? 1 : 0), rowH - (rowH > 3 ? 1 : 0));
    }
  });
  return c;
}

let mapsDrawn = "";  // the maps and legend last drawn: redrawn only when they change
function renderMaps(s) {
  const drawn = JSON.stringify([s.formats, s.runs.map((r) => [r.kind, r.context, r.first_token, r.tokens, r.map])]);
  if (drawn === mapsDrawn) return;
  mapsDrawn = drawn;
  const used = new Set();
  const maps = $("maps");
  clear(maps);
  const width = Math.max(300, maps.clientWidth || 900) / 2 - 40;
  for (const r of s.runs) {
    if (!r.map) continue;
    const box = el("div", null, "map");
    const title = `${r.context ? r.kind + " " + r.context : r.kind} — tokens ${r.first_token}–${r.first_token + r.tokens}`;
    box.appendChild(el("div", title));
    if (r.map.kind === "cocktail") {
      const chunks = r.map.chunks || "";
      const cell = Math.max(2, Math.min(16, Math.floor(width / Math.max(1, chunks.length))));
      box.appendChild(el("div", "Cocktail chunk map (S sink, F fp16, 4 int4, 2 int2)", "note"));
      box.appendChild(drawGrid([chunks], CHUNK_COLORS, cell, 14));
    } else {
      const colors = {};
      for (const f of s.formats) colors[f.code] = FORMAT_COLORS[f.name] || "#999";
      const blocks = r.map.k.length ? r.map.k[0].length : 0;
      const cell = Math.max(2, Math.min(14, Math.floor(width / Math.max(1, blocks))));
      const rowH = Math.max(2, Math.min(8, Math.floor(160 / Math.max(1, r.map.k.length))));
      const sides = el("div", null, "sides");
      for (const side of ["k", "v"]) {
        for (const line of r.map[side]) for (const ch of line) used.add(ch);
        const col = el("div");
        col.appendChild(el("div", side === "k" ? "K (layers × blocks)" : "V", "note"));
        col.appendChild(drawGrid(r.map[side], colors, cell, rowH));
        sides.appendChild(col);
      }
      box.appendChild(sides);
    }
    maps.appendChild(box);
  }
  if (!maps.firstChild) maps.appendChild(el("div", "no shared blocks", "note"));
  const legend = $("format-legend");
  clear(legend);
  for (const f of s.formats) {
    if (!used.has(f.code)) continue;
    const item = el("span");
    const sw = el("span", null, "swatch");
    sw.style.background = FORMAT_COLORS[f.name] || "#999";
    item.appendChild(sw);
    item.appendChild(document.createTextNode(`${f.name}: K ${f.k_bits.toFixed(2)} / V ${f.v_bits.toFixed(2)} bits/element`));
    legend.appendChild(item);
  }
}

// A small line chart: series of [t, y] (t in seconds before now, y or null), x from -span to 0.
function chart(svg, lines, unit) {
  clear(svg);
  const W = 460, H = 160, L = 40, R = 8, T = 8, B = 20;
  let ymax = 0, tmin = 0;
  for (const ln of lines) for (const [t, y] of ln.points) { if (y !== null && y > ymax) ymax = y; if (t < tmin) tmin = t; }
  const span = Math.max(60, -tmin);
  ymax = ymax > 0 ? ymax * 1.1 : 1;
  const X = (t) => L + (W - L - R) * (1 + t / span), Y = (y) => T + (H - T - B) * (1 - y / ymax);
  svg.appendChild(svgEl("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
  svg.appendChild(svgEl("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
  svg.appendChild(svgEl("text", { x: 2, y: T + 8 }, ymax.toPrecision(3)));
  svg.appendChild(svgEl("text", { x: 2, y: H - B }, "0"));
  svg.appendChild(svgEl("text", { x: L, y: H - 4 }, `-${Math.round(span)} s`));
  svg.appendChild(svgEl("text", { x: W - R - 20, y: H - 4 }, "now"));
  let ly = T + 10;
  for (const ln of lines) {
    const pts = ln.points.filter(([, y]) => y !== null);
    if (ln.dots) {
      for (const [t, y] of pts) svg.appendChild(svgEl("circle", { cx: X(t), cy: Y(y), r: 2, class: "dot" }));
    } else if (pts.length) {
      svg.appendChild(svgEl("polyline", { points: pts.map(([t, y]) => `${X(t).toFixed(1)},${Y(y).toFixed(1)}`).join(" "), class: ln.cls }));
    }
    svg.appendChild(svgEl("text", { x: W - 150, y: ly }, ln.label + (unit ? ` (${unit})` : "")));
    ly += 12;
  }
}

function renderCharts(s) {
  const se = s.series;
  const zip = (ys) => se.t.map((t, i) => [t, ys[i]]);
  chart($("chart-throughput"), [
    { points: zip(se.decode_tok_s), cls: "line1", label: "decode" },
    { points: zip(se.prefill_tok_s), cls: "line2", label: "prefill" },
  ], "tok/s");
  chart($("chart-ttft"), [{ points: zip(se.ttft_mean_s), dots: true, label: "mean TTFT" }], "s");
}

function renderServer(s) {
  const sv = s.server;
  $("server-info").textContent = `${sv.model} · policy ${sv.policy_spec} · ${sv.n_layer} layers · up ${Math.round(sv.uptime_s)} s`;
}

function setStatus(text, ok) {
  const st = $("status");
  st.textContent = text;
  st.className = "status " + (ok ? "ok" : "bad");
}

let failures = 0;
async function poll() {
  try {
    const res = await fetch("/v1/state", { cache: "no-store", headers: key ? { Authorization: "Bearer " + key } : {} });
    if (res.status === 401) {
      setStatus("API key required: open /dashboard#key=YOUR_KEY", false);
    } else if (!res.ok) {
      setStatus(`server answered ${res.status}; retrying`, false);
    } else {
      const s = await res.json();
      renderServer(s);
      renderBudget(s);
      renderRequests(s);
      renderRuns(s);
      renderMaps(s);
      renderCharts(s);
      failures = 0;
      document.body.dataset.sampledAt = String(s.server.sampled_at);
      document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
      setStatus("live · " + new Date(s.server.sampled_at * 1000).toLocaleTimeString(), true);
    }
  } catch (e) {
    failures++;
    setStatus(`server unreachable (${failures}); retrying`, false);
  }
  setTimeout(poll, POLL_MS);
}

poll();
