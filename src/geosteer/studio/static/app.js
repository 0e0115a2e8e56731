// geosteer studio client: plain JS over the JSON API; figures come from the server as plotly JSON.
"use strict";
const G = (window.__geosteer = { firstPaint: null, plotlyPaint: null, ready: false, lastEffect: null, busy: 0,
                                 errors: [] });
const $ = (id) => document.getElementById(id);
const cur = { layer: null, head: null, dim: null };
let info = null;
const TOKEN = (document.querySelector('meta[name="geosteer-token"]') || {}).content || "";

function status(msg, isError) {
  const s = $("status");
  s.textContent = msg;
  s.className = isError ? "error" : "";
  if (isError) G.errors.push(msg);
}

async function api(method, path, body) {
  G.busy++;
  try {
    // every request carries the per-session token the server wrote into the page (state-changing
    // requests and the GETs that run the model need it)
    const opts = { method, headers: { "X-Geosteer-Token": TOKEN }, credentials: "same-origin" };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const r = await fetch(path, opts);
    let data = null;
    try { data = await r.json(); } catch (e) { data = { error: `HTTP ${r.status}` }; }
    if (!r.ok) throw new Error(data && data.error ? data.error : `HTTP ${r.status}`);
    return data;
  } finally {
    G.busy--;
  }
}

function effectOpts() {
  return { prompt: $("prompt").value, max_new_tokens: parseInt($("max-new").value, 10),
           reference: $("reference").value };
}

function fill(sel, values, labelFn) {
  sel.replaceChildren();
  for (const v of values) {
    const o = document.createElement("option");
    o.value = String(v);
    o.textContent = labelFn ? labelFn(v) : String(v);
    sel.appendChild(o);
  }
}

function renderInfo(d) {
  info = d;
  $("model-name").textContent = d.model;
  $("artifact-name").textContent = d.artifact;
  $("version").textContent = d.version;
  $("max-new").max = d.max_new_tokens_cap;
  const rl = $("rank-layer");
  fill(rl, ["all"].concat(d.layers), (v) => (v === "all" ? "all" : `layer ${v}`));
  fill($("artifacts"), d.artifacts);
  for (const b of d.broken || []) {  // workspace folders whose config cannot be read: shown, not loadable
    const o = document.createElement("option");
    o.disabled = true;
    o.value = "";
    o.textContent = `${b.name} (broken)`;
    o.title = b.error;
    $("artifacts").appendChild(o);
  }
  renderHistory(d.history);
  renderList("walls", d.walls || [], "none");
  const ul = $("results");
  ul.replaceChildren();
  for (const r of d.results || []) {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = "/results/" + r.id.split("/").map(encodeURIComponent).join("/");
    a.target = "_blank";
    a.textContent = r.label || r.id;
    li.appendChild(a);
    ul.appendChild(li);
  }
  if (!(d.results || []).length) ul.innerHTML = "<li>none</li>";
}

function renderList(id, items, empty) {
  const ol = $(id);
  ol.replaceChildren();
  for (const e of items.length ? items : [empty]) {
    const li = document.createElement("li");
    li.textContent = e;  // text, never HTML
    ol.appendChild(li);
  }
}

function renderHistory(h) {
  const ol = $("history");
  ol.replaceChildren();
  for (const e of h) {
    const li = document.createElement("li");
    li.textContent = e;
    ol.appendChild(li);
  }
}

async function rank() {
  const by = $("rank-by").value, layer = $("rank-layer").value;
  const q = new URLSearchParams({ by, layer, top: "30", prompt: $("prompt").value });
  status(`ranking by ${by}…`);
  const d = await api("GET", "/api/rank?" + q);
  renderRank(d.rows, by);
  return d.rows;
}

function renderRank(rows, by) {
  const ol = $("ranked");
  ol.replaceChildren();
  for (const r of rows) {
    const li = document.createElement("li");
    li.textContent = `L${r.layer} H${r.head} D${r.dim}  ${by === "norm" ? "‖C‖" : "sens"}=${r.score.toPrecision(3)}`;
    li.dataset.layer = r.layer; li.dataset.head = r.head; li.dataset.dim = r.dim;
    li.addEventListener("click", () => {
      for (const x of ol.children) x.classList.remove("active");
      li.classList.add("active");
      select(r.layer, r.head, r.dim);
    });
    ol.appendChild(li);
  }
  status(`ranked ${rows.length} surfaces by ${by}`);
}

async function select(layer, head, dim) {
  cur.layer = layer; cur.head = head; cur.dim = dim;
  $("layer").value = layer; $("head").value = head; $("dim").value = dim;
  await showSurface();
}

async function showSurface(tokens = true) {
  if (cur.layer === null) return;
  const q = new URLSearchParams({ layer: cur.layer, head: cur.head, dim: cur.dim, prompt: $("prompt").value,
                                  tokens: tokens ? "1" : "0" });
  await renderSurface(await api("GET", "/api/surface?" + q));
}

// plotly.js (4.6 MB) is loaded after the first paint, which draws a plain canvas heatmap from the boot data
let plotlyPromise = null;
function loadPlotly() {
  if (window.Plotly) return Promise.resolve();
  if (!plotlyPromise) {
    plotlyPromise = new Promise((resolve, reject) => {
      const el = document.createElement("script");
      el.src = "/static/plotly.js";
      el.addEventListener("load", () => resolve());
      el.addEventListener("error", () => reject(new Error("could not load plotly.js")));
      document.head.appendChild(el);
    });
  }
  return plotlyPromise;
}

function rgbOf(c) {
  const m = String(c).match(/(\d+(?:\.\d+)?)\D+(\d+(?:\.\d+)?)\D+(\d+(?:\.\d+)?)/);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : [128, 128, 128];
}

const TYPED = { f8: Float64Array, f4: Float32Array, i4: Int32Array, u4: Uint32Array, i2: Int16Array,
                u2: Uint16Array, i1: Int8Array, u1: Uint8Array };

function matrix(z) {
  // a plotly 2-D array: nested lists, or plotly.py's typed-array spec {dtype, bdata (base64), shape}
  if (Array.isArray(z)) return z;
  const bytes = Uint8Array.from(atob(z.bdata), (ch) => ch.charCodeAt(0));
  const flat = new TYPED[z.dtype](bytes.buffer);
  const [n, m] = String(z.shape).split(",").map((v) => parseInt(v, 10));
  const rows = [];
  for (let i = 0; i < n; i++) rows.push(flat.subarray(i * m, (i + 1) * m));
  return rows;
}

function quickHeatmap(fig) {
  // the heatmap trace drawn cell by cell (rows = query values, bottom to top), same colour scale and range
  const tr = fig.data[0], z = matrix(tr.z), n = z.length, m = z[0].length;
  const scale = (Array.isArray(tr.colorscale) ? tr.colorscale : [[0, "rgb(5,48,97)"], [0.5, "rgb(247,247,247)"],
    [1, "rgb(103,0,31)"]]).map(([t, c]) => [Number(t), rgbOf(c)]);
  const lo = tr.zmin, hi = tr.zmax;
  const host = $("heatmap");
  const cv = document.createElement("canvas");
  cv.id = "quick-heatmap";
  cv.width = m; cv.height = n;
  cv.style.width = "100%"; cv.style.height = "100%"; cv.style.imageRendering = "pixelated";
  const ctx = cv.getContext("2d"), img = ctx.createImageData(m, n);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < m; j++) {
      const t = hi > lo ? Math.min(1, Math.max(0, (z[i][j] - lo) / (hi - lo))) : 0.5;
      let k = 1;
      while (k < scale.length - 1 && scale[k][0] < t) k++;
      const [t0, c0] = scale[k - 1], [t1, c1] = scale[k], w = t1 > t0 ? (t - t0) / (t1 - t0) : 0;
      const o = ((n - 1 - i) * m + j) * 4;
      for (let ch = 0; ch < 3; ch++) img.data[o + ch] = c0[ch] + w * (c1[ch] - c0[ch]);
      img.data[o + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
  host.replaceChildren(cv);
}

async function renderSurface(d) {
  const cfg = { displaylogo: false, responsive: true };
  const f = d.figures;
  G.surface = { layer: d.layer, head: d.head, dim: d.dim, norm: d.norm, coeffs: d.coeffs, version: d.version };
  if (!window.Plotly) {
    quickHeatmap(f.heatmap);
    if (G.firstPaint === null) G.firstPaint = performance.now();
    await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));  // let the canvas show
    await loadPlotly();
  }
  const quick = document.getElementById("quick-heatmap");
  if (quick) quick.remove();
  await Plotly.react("heatmap", f.heatmap.data, f.heatmap.layout, cfg);
  if (G.firstPaint === null) G.firstPaint = performance.now();
  if (G.plotlyPaint === null) G.plotlyPaint = performance.now();
  await Plotly.react("terrain", f.terrain.data, f.terrain.layout, cfg);
  await Plotly.react("controlnet", f.controlnet.data, f.controlnet.layout, cfg);
  const cn = $("controlnet");
  cn.removeAllListeners && cn.removeAllListeners("plotly_click");
  cn.on("plotly_click", (ev) => {
    const p = ev.points[0];
    $("cp-row").value = p.y; $("cp-col").value = p.x; $("cp-value").value = Number(p.z).toFixed(4);
  });
  $("surface-norm") && ($("surface-norm").textContent = d.norm.toPrecision(4));
}

function renderTop(table, top) {
  table.replaceChildren();
  for (const t of top) {
    const tr = document.createElement("tr");
    const a = document.createElement("td"); a.textContent = JSON.stringify(t.token);
    const b = document.createElement("td"); b.textContent = t.p.toFixed(4);
    tr.append(a, b);
    table.appendChild(tr);
  }
}

function renderCont(el, text, other) {
  let i = 0;
  while (i < text.length && i < other.length && text[i] === other[i]) i++;
  el.replaceChildren();
  el.appendChild(document.createTextNode(text.slice(0, i)));
  if (i < text.length) {
    const s = document.createElement("span");
    s.className = "diff";
    s.textContent = text.slice(i);
    el.appendChild(s);
  }
}

function renderEffect(e) {
  G.lastEffect = e;
  $("ref-label").textContent = e.reference;
  renderCont($("cont-before"), e.before.text, e.after.text);
  renderCont($("cont-after"), e.after.text, e.before.text);
  renderTop($("top-before"), e.before.top);
  renderTop($("top-after"), e.after.top);
  $("kl").textContent = e.kl.toExponential(3);
  $("changed").textContent = e.changed ? "yes" : "no";
  $("version").textContent = e.version;
}

async function runEffect() {
  status("generating…");
  const t0 = performance.now();
  const e = await api("POST", "/api/effect", effectOpts());
  renderEffect(e);
  $("timing").textContent = `round trip ${((performance.now() - t0) / 1000).toFixed(2)} s`;
  status("ready");
}

function range(text) {
  const t = text.trim();
  if (!t || t === "all") return undefined;
  const m = t.match(/^(\d+)\s*(?:[-–:]\s*(\d+))?$/);
  if (!m) throw new Error(`bad range '${t}': use 'all', '5' or '5-10'`);
  return [parseInt(m[1], 10), parseInt(m[2] === undefined ? m[1] : m[2], 10)];
}

// "a..b" (either side may be empty: an open end) -> [a, b] with null for an open end; "" -> undefined
function valueRange(text, name) {
  const t = (text || "").trim();
  if (!t) return undefined;
  const m = t.match(/^\s*(-?[0-9.eE+-]*)\s*\.\.\s*(-?[0-9.eE+-]*)\s*$/);
  if (!m) throw new Error(`${name}: type lo..hi (e.g. 0.5..2, or 0.5.. for no upper end)`);
  const side = (s) => (s === "" ? null : Number(s));
  const out = [side(m[1]), side(m[2])];
  if (out.some((v) => v !== null && !Number.isFinite(v))) throw new Error(`${name}: lo and hi must be numbers`);
  return out;
}

async function edit(op) {
  if (cur.layer === null) throw new Error("choose a surface first");
  const body = { op, scope: $("scope").value, layer: cur.layer };
  if (body.scope !== "layer") body.head = cur.head;
  if (body.scope === "surface") body.dim = cur.dim;
  if (op === "set") {
    body.rows = range($("cp-row").value); body.cols = range($("cp-col").value);
    body.value = parseFloat($("cp-value").value);
    if (body.rows === undefined || body.cols === undefined) throw new Error("type a control-point row and col");
  } else if (op === "wall") {  // the exact wall: q/k value ranges (empty: the whole line), no control points
    const q = valueRange($("wall-q").value, "q"), k = valueRange($("wall-k").value, "k");
    if (q) body.q = q;
    if (k) body.k = k;
  } else {
    const r = range($("rows").value), c = range($("cols").value);
    if (r) body.rows = r;
    if (c) body.cols = c;
  }
  if (op === "scale") body.factor = parseFloat($("factor").value);
  body.effect = effectOpts();
  status(`${op}…`);
  const t0 = performance.now();
  const d = await api("POST", "/api/edit", body);
  renderEffect(d.effect);
  $("timing").textContent = `edit round trip ${((performance.now() - t0) / 1000).toFixed(2)} s`;
  await refreshInfo();
  await showSurface();
  status(`applied: ${d.edit}`);
}

async function refreshInfo() { renderInfo(await api("GET", "/api/info")); }

async function undo() {
  const d = await api("POST", "/api/undo", {});
  await refreshInfo();
  await showSurface();
  await runEffect();
  status(d.undone ? `undone: ${d.undone}` : "nothing to undo");
}

async function save() {
  const name = $("save-name").value.trim();
  const d = await api("POST", "/api/save", { name });
  await refreshInfo();
  $("artifacts").value = d.name;
  status(`saved '${d.name}' (digest ${d.digest})`);
  G.lastSave = d;
}

async function load() {
  const name = $("artifacts").value;
  const d = await api("POST", "/api/load", { name });
  G.lastLoad = d;
  await refreshInfo();
  await showSurface();
  await runEffect();
  status(`loaded '${d.name}' (digest ${d.digest})`);
}

function guard(fn) {
  return async (...args) => {
    try { await fn(...args); } catch (e) { status(e.message, true); }
  };
}

function wire() {
  $("run").addEventListener("click", guard(runEffect));
  $("rank").addEventListener("click", guard(rank));
  $("show").addEventListener("click", guard(() => select(parseInt($("layer").value, 10),
    parseInt($("head").value, 10), parseInt($("dim").value, 10))));
  for (const op of ["invert", "zero", "grid-wall", "wall", "scale", "set"]) {
    $("op-" + op).addEventListener("click", guard(() => edit(op)));
  }
  $("undo").addEventListener("click", guard(undo));
  $("save").addEventListener("click", guard(save));
  $("load").addEventListener("click", guard(load));
}

async function main() {
  wire();
  const boot = await (window.__boot || Promise.resolve(null));
  let rows;
  if (boot) {  // info, ranking and the first surface arrived while plotly.js was loading
    renderInfo(boot.info);
    $("prompt").value = boot.info.default_prompt;
    rows = boot.rank.rows;
    renderRank(rows, "norm");
  } else {
    const d = await api("GET", "/api/info");
    renderInfo(d);
    $("prompt").value = d.default_prompt;
    rows = await rank();
  }
  if (rows.length) {
    $("ranked").children[0].classList.add("active");
    // first paint without the token dots (no model pass), then the dots
    cur.layer = rows[0].layer; cur.head = rows[0].head; cur.dim = rows[0].dim;
    $("layer").value = cur.layer; $("head").value = cur.head; $("dim").value = cur.dim;
    if (boot && boot.surface) await renderSurface(boot.surface);
    else await showSurface(false);
    await showSurface(true);
  }
  await runEffect();
  G.ready = true;
}

guard(main)();
