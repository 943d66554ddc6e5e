// vramlens page: knobs -> /api/estimate (+ model card, dtype table, GPU matrix, plans). State lives in the URL.
// No inline script or style anywhere (the CSP allows none): colours are SVG attributes or CSS classes.
"use strict";
(function () {
  const form = document.getElementById("knobs");
  const $ = (id) => document.getElementById(id);
  const GiB = 1024 ** 3;
  const gib = (n) => (n / GiB).toFixed(2);
  const SVG = "http://www.w3.org/2000/svg";
  const fields = Array.from(form.querySelectorAll("[data-param]"));
  const byParam = Object.fromEntries(fields.map((el) => [el.dataset.param, el]));
  let serial = 0;
  let timer = null;
  let busyTimer = null;
  let fitAvailable = true;
  let last = null;  // {data, q, config}: the estimate on screen, for the downloads
  const catalogNames = new Set();

  // ---- the knobs -----------------------------------------------------------------------------

  function value(el) {
    if (el.type === "checkbox") return el.checked ? "true" : "false";
    return el.value.trim();
  }

  // A knob applies when every condition of its label's data-show ("mode=train;fsdp=true") holds.
  function applies(el) {
    const rule = el.closest("label") && el.closest("label").dataset.show;
    if (!rule) return true;
    return rule.split(";").every((cond) => {
      const [k, vals] = cond.split("=");
      const other = byParam[k];
      return other ? vals.split("|").includes(value(other) || other.dataset.default) : true;
    });
  }

  function showApplicable() {
    for (const el of fields) {
      const label = el.closest("label");
      if (label && label.dataset.show) label.hidden = !applies(el);
    }
  }

  const configText = () => $("f-config").value.trim();

  // Advice speaks the interface it is shown in: the CLI's "--optimizer adamw-8bit" becomes
  // "optimizer = adamw-8bit" with the knob's label ("--fsdp": "FSDP on"); flags without a knob stay.
  function knobWords(text) {
    return text.replace(/--([a-z][a-z0-9-]*)(?: ([^\s,;()]+))?/g, (all, flag, val) => {
      const knob = byParam[flag.replace(/-/g, "_")];
      const span = knob && knob.closest("label") && knob.closest("label").querySelector("span");
      if (!span) return all;
      const name = span.textContent.trim();
      if (knob.type === "checkbox") return name + " on" + (val ? " " + val : "");
      return val && !val.startsWith("-") ? name + " = " + val : name;
    });
  }

  // Parameters that differ from their defaults and apply, so links stay short and honest.
  // With a pasted config the config wins: model and params are left out and source=config says so.
  function params() {
    const p = new URLSearchParams();
    const config = configText();
    for (const el of fields) {
      const k = el.dataset.param;
      if (config && (k === "model" || k === "params")) continue;
      const v = value(el);
      if (v !== "" && v !== el.dataset.default && applies(el)) p.set(k, v);
    }
    if (config) p.set("source", "config");
    return p;
  }

  function loadFromURL() {
    const q = new URLSearchParams(location.search);
    for (const el of fields) {
      if (!q.has(el.dataset.param)) continue;
      const v = q.get(el.dataset.param);
      if (el.type === "checkbox") el.checked = v === "true" || v === "1";
      else el.value = v;
    }
    return q.get("source");
  }

  function sourceNote(config, fromLink) {
    const note = $("source-note");
    const model = value(byParam.model) || value(byParam.params);
    let text = "";
    if (config) {
      text = "Using the pasted config.json" + (model ? "; the model \u201c" + model + "\u201d is ignored until the " +
        "config is cleared." : ".");
    } else if (fromLink === "config") {
      text = "This link was made from a pasted config.json, which links do not carry: paste it again.";
    }
    note.textContent = text;
    note.hidden = !text;
    byParam.model.closest("label").classList.toggle("ignored", !!config);
    byParam.params.closest("label").classList.toggle("ignored", !!config);
  }

  // ---- requests ----------------------------------------------------------------------------

  // The JSON body of a POST: each value typed as its knob's kind (a GPU named 4090 stays a string).
  function body(q, config) {
    const out = {};
    for (const [k, v] of q.entries()) {
      if (k === "model" || k === "source") continue;
      const kind = byParam[k] ? byParam[k].dataset.kind : (k === "top" ? "number" : "text");
      out[k] = kind === "number" ? Number(v) : kind === "check" ? v === "true" : v;
    }
    out.config = config;
    return out;
  }

  function call(path, q, config) {
    if (config) {
      return fetch(path, {method: "POST", headers: {"content-type": "application/json"},
                          body: JSON.stringify(body(q, config))});
    }
    const plain = new URLSearchParams(q);
    plain.delete("source");
    return fetch(path + "?" + plain.toString());
  }

  async function getJSON(path, q, config) {
    const r = await call(path, q, config);
    let d = null;
    try { d = await r.json(); } catch (e) { d = {error: "HTTP " + r.status}; }
    return {ok: r.ok, status: r.status, data: d};
  }

  // The loading indicator: shown only for work that takes longer than 200 ms.
  function busy(text) {
    clearTimeout(busyTimer);
    $("result").setAttribute("aria-busy", text ? "true" : "false");
    if (!text) {
      $("status").hidden = true;
      $("status").textContent = "";
      return;
    }
    busyTimer = setTimeout(() => {
      $("status").textContent = text;
      $("status").hidden = false;
    }, 200);
  }

  function showError(msg) {
    $("error").textContent = msg;
    $("error").hidden = !msg;
  }

  // Nothing of an earlier answer stays on screen once a new question is asked or an error comes.
  function clearResult() {
    last = null;
    $("answer").hidden = true;
    $("total").textContent = "\u2013";
    $("total").dataset.bytes = "";
    $("chart").replaceChildren();
    for (const id of ["components", "compare", "gpu-matrix", "plans"]) {
      $(id).querySelector("tbody").replaceChildren();
    }
    for (const id of ["notes-section", "model-section", "compare-section", "gpus-section", "plans-section"]) {
      $(id).hidden = true;
    }
    $("cli").textContent = "";
    $("copied").textContent = "";
  }

  // ---- the estimate ------------------------------------------------------------------------

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function render(d, q, config) {
    $("answer").hidden = false;
    $("empty").hidden = true;
    $("total").textContent = gib(d.device_total_bytes);
    $("total").dataset.bytes = String(d.device_total_bytes);
    $("fig-allocated").textContent = gib(d.peak_allocated_bytes) + " GiB";
    $("fig-reserved").textContent = gib(d.peak_reserved_bytes) + " GiB";
    $("fig-total").textContent = gib(d.device_total_bytes) + " GiB";
    $("fig-phase").textContent = d.peak_phase;
    const v = $("verdict");
    if (d.fits === null || d.fits === undefined) {
      v.className = "verdict unknown";
      v.textContent = "no GPU chosen: pick one to get a verdict";
    } else {
      const cap = d.gpu.usable_bytes;
      v.className = "verdict " + (d.fits ? "fits" : "nofit");
      v.textContent = (d.fits ? "FITS" : "DOES NOT FIT") + " on " + d.gpu.name + ": " + gib(d.device_total_bytes) +
        " of " + gib(cap) + " GiB (" + gib(Math.abs(d.headroom_bytes)) + " GiB " +
        (d.headroom_bytes >= 0 ? "free" : "over") + ")";
    }
    $("advice").textContent = knobWords(d.advice || "");
    const tbody = $("components").querySelector("tbody");
    tbody.replaceChildren();
    for (const [name, bytes] of Object.entries(d.components)) {
      if (!bytes) continue;
      const tr = document.createElement("tr");
      cell(tr, name.replace(/_/g, " "));
      cell(tr, gib(bytes), "num");
      cell(tr, (d.explanations || {})[name] || "");
      tbody.appendChild(tr);
    }
    const notes = (d.notes || []).slice();
    const ul = $("notes");
    ul.replaceChildren();
    for (const n of notes) {
      const li = document.createElement("li");
      li.textContent = n;
      ul.appendChild(li);
    }
    $("notes-section").hidden = notes.length === 0;
    drawChart(d);
    $("cli").textContent = cliCommand(q, config);
    last = {data: d, q: q, config: config};
  }

  // ---- the phase chart ---------------------------------------------------------------------

  // Components alive in every phase, bottom of each bar first; master weights last because
  // autocast's cached copies (counted there) are gone by the optimizer step.
  const PERSISTENT = ["weights", "optimizer_states", "comm_buffers", "kv_cache", "workspace", "master_weights"];
  const COLORS = {
    weights: "#1f5fa8", optimizer_states: "#b35900", comm_buffers: "#6b4fa0", kv_cache: "#0d7a6b",
    workspace: "#5c5c5c", master_weights: "#8a6d00", live: "#c0392b", cache: "#9aa7b5", context: "#3d3d3d",
  };
  const NAMES = {
    weights: "weights", optimizer_states: "optimizer states", comm_buffers: "communication buffers",
    kv_cache: "KV cache", workspace: "cuBLAS workspaces", master_weights: "master weights / autocast copies",
    live: "alive only in this phase (activations, gradients, temporaries)",
    cache: "reserved, not allocated (allocator cache)", context: "outside the allocator (CUDA context)",
  };

  // One bar per phase: the persistent components, then the rest of that phase's live total; the
  // peak phase's bar continues with the allocator's cache and the CUDA context up to nvidia-smi.
  function phaseBars(d) {
    const c = d.components;
    const outside = Math.max(0, d.device_total_bytes - d.peak_reserved_bytes);
    const parts = Object.assign({}, c, {workspace: Math.max(0, (c.runtime || 0) - outside)});
    return Object.entries(d.phases).map(([phase, total]) => {
      const segs = [];
      let used = 0;
      for (const k of PERSISTENT) {
        const n = Math.min(parts[k] || 0, Math.max(0, total - used));
        if (n > 0) segs.push({key: k, bytes: n});
        used += n;
      }
      if (total - used > 0) segs.push({key: "live", bytes: total - used});
      if (phase === d.peak_phase) {
        const cache = Math.max(0, d.peak_reserved_bytes - d.peak_allocated_bytes);
        if (cache > 0) segs.push({key: "cache", bytes: cache});
        if (outside > 0) segs.push({key: "context", bytes: outside});
      }
      return {phase: phase, total: total, segs: segs, peak: phase === d.peak_phase};
    });
  }

  function niceStep(span) {
    const raw = span / 5;
    const mag = 10 ** Math.floor(Math.log10(raw));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * mag >= raw) return m * mag;
    return 10 * mag;
  }

  function el(name, attrs, text) {
    const e = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // Text width in px at the chart's font, measured in the page (labels are placed by their size).
  function measurer(svg) {
    return (text, size) => {
      const t = el("text", {x: 0, y: 0, "font-size": size, "font-family": "sans-serif"}, text);
      svg.appendChild(t);
      const w = t.getComputedTextLength();
      t.remove();
      return w;
    };
  }

  // Right-margin labels at their line's height, pushed apart so none overlaps, kept inside [lo, hi].
  function spread(labels, gap, lo, hi) {
    labels.sort((a, b) => a.y - b.y);
    for (let i = 0; i < labels.length; i++) {
      labels[i].y = Math.max(labels[i].y, lo, i ? labels[i - 1].y + gap : lo);
    }
    for (let i = labels.length - 1; i >= 0; i--) {
      labels[i].y = Math.min(labels[i].y, hi, i < labels.length - 1 ? labels[i + 1].y - gap : hi);
    }
    return labels;
  }

  function drawChart(d) {
    const box = $("chart");
    box.replaceChildren();
    const W = 680, FS = 12, LH = 16;
    const svg = el("svg", {xmlns: SVG, viewBox: "0 0 " + W + " 100", width: W, height: 100,
                           "font-family": "sans-serif", "font-size": FS});
    svg.appendChild(el("title", {}, "memory at each phase, GiB per GPU"));
    box.appendChild(svg);  // in the document, so text can be measured
    const measure = measurer(svg);
    const bars = phaseBars(d);
    const cap = d.gpu ? d.gpu.usable_bytes : 0;
    const lines = [
      {y: d.peak_allocated_bytes, text: "peak allocated " + gib(d.peak_allocated_bytes) + " GiB (" + d.peak_phase + ")",
       color: "#c0392b", dash: ""},
      {y: d.device_total_bytes, text: "nvidia-smi " + gib(d.device_total_bytes) + " GiB", color: "#1d1d1f", dash: "4 3"},
    ];
    if (cap) lines.push({y: cap, text: d.gpu.name + " " + gib(cap) + " GiB", color: "#11602b", dash: "1 3"});
    const ymax = Math.max(d.device_total_bytes, cap) * 1.05;
    const step = niceStep(ymax / GiB) * GiB;
    const tickText = (n) => (n / GiB).toFixed(step / GiB < 1 ? 2 : 0);
    const left = 10 + Math.max(...[0, step, Math.floor(ymax / step) * step].map((n) => measure(tickText(n), FS)));
    const right = 12 + Math.max(...lines.map((l) => measure(l.text, FS)));
    const top = LH + 4, ph = 220;
    const pw = Math.max(120, W - left - right - 8);
    const py = (n) => top + ph - (n / ymax) * ph;
    // axis and grid
    svg.appendChild(el("text", {x: 2, y: FS, fill: "#444"}, "GiB"));
    for (let n = 0; n <= ymax; n += step) {
      svg.appendChild(el("line", {x1: left, x2: left + pw, y1: py(n), y2: py(n), stroke: "#e4e4e4"}));
      svg.appendChild(el("text", {x: left - 6, y: py(n) + 4, "text-anchor": "end", fill: "#444", class: "tick"},
                         tickText(n)));
    }
    // bars
    const slot = pw / bars.length;
    const bw = Math.min(90, slot * 0.55);
    const present = new Set();
    bars.forEach((b, i) => {
      const x = left + slot * i + (slot - bw) / 2;
      let acc = 0;
      for (const s of b.segs) {
        present.add(s.key);
        const r = el("rect", {x: x, y: py(acc + s.bytes), width: bw, height: Math.max(0.5, py(acc) - py(acc + s.bytes)),
                              fill: COLORS[s.key], "data-seg": s.key});
        r.appendChild(el("title", {}, NAMES[s.key] + ": " + gib(s.bytes) + " GiB"));
        svg.appendChild(r);
        acc += s.bytes;
      }
      let name = b.phase + (b.peak ? " (peak)" : "");
      while (measure(name, FS) > slot - 4 && name.length > 3) name = name.slice(0, -2) + "\u2026";
      svg.appendChild(el("text", {x: x + bw / 2, y: top + ph + LH, "text-anchor": "middle", fill: "#1d1d1f",
                                  class: "phase", "font-weight": b.peak ? "bold" : "normal"}, name));
    });
    // labelled lines: the peak, nvidia-smi and the GPU; labels in the right margin never overlap
    const placed = spread(lines.map((l) => Object.assign({}, l, {line: py(l.y), y: py(l.y) + 4})), LH,
                          top - 2, top + ph + 4);
    for (const l of placed) {
      svg.appendChild(el("line", {x1: left, x2: left + pw + 4, y1: l.line, y2: l.line, stroke: l.color,
                                  "stroke-width": 1.5, "stroke-dasharray": l.dash}));
      if (Math.abs(l.y - 4 - l.line) > 1) {  // a label moved off its line: a leader shows which line it names
        svg.appendChild(el("line", {x1: left + pw + 4, x2: left + pw + 10, y1: l.line, y2: l.y - 4, stroke: l.color}));
      }
      svg.appendChild(el("text", {x: left + pw + 12, y: l.y, fill: l.color, class: "line-label"}, l.text));
    }
    // legend under the plot, wrapped to the width by measured text
    let lx = left, ly = top + ph + LH * 2 + 8;
    for (const key of Object.keys(NAMES)) {
      if (!present.has(key)) continue;
      const w = 16 + measure(NAMES[key], FS) + 14;
      if (lx + w > W - 4 && lx > left) { lx = left; ly += LH + 2; }
      svg.appendChild(el("rect", {x: lx, y: ly - 10, width: 11, height: 11, fill: COLORS[key]}));
      svg.appendChild(el("text", {x: lx + 16, y: ly, fill: "#1d1d1f", class: "legend"}, NAMES[key]));
      lx += w;
    }
    const H = ly + 8;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("height", H);
    const sum = Object.values(d.components).reduce((a, b) => a + b, 0);
    const outside = d.device_total_bytes - d.peak_reserved_bytes;
    $("chart-note").textContent =
      "Each bar is what is allocated at that phase's peak. The components add up to " + gib(sum) + " GiB, " +
      "but they are not all alive at once: the peak (" + d.peak_phase + ") holds " + gib(d.peak_allocated_bytes) +
      " GiB allocated; PyTorch reserves " + gib(d.peak_reserved_bytes) + " GiB; nvidia-smi adds the CUDA context " +
      "outside the allocator (" + gib(outside) + " GiB) for " + gib(d.device_total_bytes) + " GiB.";
  }

  // ---- the CLI line ------------------------------------------------------------------------

  const quote = (s) => /^[A-Za-z0-9._,\/:=+@%-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'";

  // The exact `vramlens estimate` line for the knobs as they are (the CLI's defaults are the page's).
  function cliCommand(q, config) {
    const parts = ["vramlens", "estimate"];
    if (config) parts.push("config.json");
    else if (q.get("model")) parts.push(quote(q.get("model")));
    for (const [k, v] of q.entries()) {
      if (k === "model" || k === "source") continue;
      const flag = "--" + k.replace(/_/g, "-");
      if (byParam[k] && byParam[k].dataset.kind === "check") {
        if (v === "true") parts.push(flag);
        continue;
      }
      parts.push(flag, quote(v));
    }
    return parts.join(" ") + (config ? "   # config.json: the pasted config, saved as a file" : "");
  }

  // ---- the model card, the dtype table, the GPU matrix, the plans ----------------------------

  function row(dl, term, text) {
    if (text === null || text === undefined || text === "") return;
    const dt = document.createElement("dt");
    dt.textContent = term;
    const dd = document.createElement("dd");
    dd.textContent = String(text);
    dd.dataset.field = term;
    dl.append(dt, dd);
  }

  const count = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : n);

  function renderModel(m, est) {
    const dl = $("model-card");
    dl.replaceChildren();
    row(dl, "name", m.name);
    row(dl, "architecture", m.architecture + (m.model_type ? " (" + m.model_type + ")" : ""));
    row(dl, "parameters", count(est.model.params));
    if (est.model.trainable_params !== undefined && est.workload.mode === "train") {
      row(dl, "trainable", count(est.model.trainable_params));
    }
    row(dl, "layers", count(m.layers));
    row(dl, "hidden size", count(m.hidden_size));
    row(dl, "attention heads", count(m.heads));
    row(dl, "KV heads", count(m.kv_heads) + (m.kv_heads < m.heads ? " (grouped-query)" : ""));
    row(dl, "head dim", count(m.head_dim));
    row(dl, "vocabulary", count(m.vocab_size));
    row(dl, "context length", m.context_length ? count(m.context_length) + " tokens" : "");
    if (m.experts) row(dl, "experts", m.experts + " (" + m.experts_per_token + " per token)");
    row(dl, "source", m.source);
    const ul = $("assumed");
    ul.replaceChildren();
    for (const a of m.assumed || []) {
      const li = document.createElement("li");
      li.textContent = a;
      ul.appendChild(li);
    }
    $("assumed-box").hidden = !(m.assumed || []).length;
    $("model-section").hidden = false;
  }

  function renderCompare(c) {
    const thead = $("compare").querySelector("thead");
    const tr = document.createElement("tr");
    for (const h of ["", ...c.dtypes]) {
      const th = document.createElement("th");
      th.scope = "col";
      th.textContent = h;
      if (h) th.className = "num";
      tr.appendChild(th);
    }
    thead.replaceChildren(tr);
    const tbody = $("compare").querySelector("tbody");
    tbody.replaceChildren();
    for (const r of c.rows) {
      const tr2 = document.createElement("tr");
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = r.mode === "train" ? "training" : r.mode;
      tr2.appendChild(th);
      for (const dt of c.dtypes) {
        const x = r.cells[dt];
        const td = cell(tr2, x.error ? "\u2013" : gib(x.device_total_bytes) + " GiB", "num");
        td.dataset.dtype = dt;
        if (x.error) td.title = x.error;
        if (x.fits === true || x.fits === false) td.classList.add(x.fits ? "ok" : "bad");
      }
      tbody.appendChild(tr2);
    }
    $("compare-section").hidden = false;
  }

  function renderGpus(g) {
    const tbody = $("gpu-matrix").querySelector("tbody");
    tbody.replaceChildren();
    let first = null;
    for (const r of g.gpus) {
      const tr = document.createElement("tr");
      cell(tr, r.name);
      cell(tr, gib(r.usable_bytes), "num");
      cell(tr, r.error ? r.error : r.fits ? "yes" : "no", r.error ? "" : r.fits ? "ok" : "bad");
      cell(tr, r.error ? "" : (r.headroom_bytes >= 0 ? "" : "\u2212") + gib(Math.abs(r.headroom_bytes)), "num");
      tbody.appendChild(tr);
      if (!first && r.fits) first = r;
    }
    const n = g.gpus.filter((r) => r.fits).length;
    $("gpus-summary").textContent = n
      ? n + " of " + g.gpus.length + " catalog GPUs fit; the smallest is " + first.name + "."
      : "None of the " + g.gpus.length + " catalog GPUs fits one copy of this workload: see the plans, or add GPUs.";
    $("gpus-section").hidden = false;
  }

  // The settings a plan changes, compared with the knobs as they are now.
  function planChanges(settings) {
    const diff = [];
    for (const [k, v] of Object.entries(settings || {})) {
      const knob = byParam[k];
      if (!knob) continue;
      const mine = value(knob) || knob.dataset.default;
      const theirs = v === null ? "" : String(v);
      if (theirs !== mine && !(theirs === "" && mine === knob.dataset.default)) diff.push(k + "=" + theirs);
    }
    return diff.join(" ") || "as given";
  }

  function applyPlan(settings) {
    for (const [k, v] of Object.entries(settings || {})) {
      const knob = byParam[k];
      if (!knob) continue;
      if (knob.type === "checkbox") knob.checked = v === true || v === "true";
      else knob.value = v === null ? "" : String(v);
    }
    showApplicable();
    update();
  }

  // The plan's configs (fit --emit KIND), one download each: the same text the CLI prints.
  function configCell(configs, which) {
    const td = document.createElement("td");
    const kinds = Object.keys(configs);
    if (!kinds.length) { td.textContent = "none"; return td; }
    const sel = document.createElement("select");
    sel.className = "config-kind";
    sel.setAttribute("aria-label", "config of plan " + which);
    for (const k of kinds) {
      const o = document.createElement("option");
      o.value = k;
      o.textContent = k;
      sel.appendChild(o);
    }
    const b = document.createElement("button");
    b.type = "button";
    b.className = "download-config";
    b.textContent = "download";
    b.setAttribute("aria-label", "download the config of plan " + which);
    b.addEventListener("click", () => {
      const c = configs[sel.value];
      save(new Blob([c.text + "\n"], {type: "text/plain"}), c.file);
    });
    td.append(sel, " ", b);
    return td;
  }

  function renderPlans(d) {
    const tbody = $("plans").querySelector("tbody");
    tbody.replaceChildren();
    if (!d) return;
    let plans = d.plans || [];
    let closest = false;
    if (!plans.length && d.closest) { plans = [d.closest]; closest = true; }
    const parts = [];
    if (d.fitting !== undefined && d.evaluated !== undefined) {
      parts.push(d.fitting + " of " + d.evaluated + " plans fit.");
    }
    if (closest || d.fitting === 0) parts.push("Nothing fits" + (closest ? "; the closest plan is shown." : "."));
    if (d.min_gpu) parts.push("Hardware that would fit: " + (d.min_gpu.name || JSON.stringify(d.min_gpu)) + ".");
    if (d.message) parts.push(d.message);
    $("plans-summary").textContent = parts.join(" ");
    plans.forEach((p, i) => {
      const tr = document.createElement("tr");
      cell(tr, closest ? "closest" : String(i + 1));
      cell(tr, planChanges(p.settings));
      cell(tr, p.device_total_bytes !== undefined ? gib(p.device_total_bytes) : "", "num");
      cell(tr, p.fits ? "yes" : "no", p.fits ? "ok" : "bad");
      cell(tr, p.step_time_s !== undefined ? p.step_time_s.toFixed(2) : "", "num");
      cell(tr, p.tokens_per_s !== undefined ? p.tokens_per_s.toFixed(0) : "", "num");
      cell(tr, p.host_bytes ? gib(p.host_bytes) : "", "num");
      cell(tr, (p.tradeoffs || []).join("; "));
      tr.appendChild(configCell(p.configs || {}, closest ? "closest" : String(i + 1)));
      const td = document.createElement("td");
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = "apply";
      b.className = "apply";
      b.setAttribute("aria-label", "apply plan " + (closest ? "closest" : i + 1) + ": " + planChanges(p.settings));
      b.addEventListener("click", () => applyPlan(p.settings));
      td.appendChild(b);
      tr.appendChild(td);
      tbody.appendChild(tr);
    });
    $("plans-section").hidden = plans.length === 0 && !parts.length;
  }

  // ---- one query ---------------------------------------------------------------------------

  async function update() {
    const mine = ++serial;
    showApplicable();
    const q = params();
    const config = configText();
    const fromLink = new URLSearchParams(location.search).get("source");
    sourceNote(config, config ? "" : (mine === 1 ? fromLink : ""));
    history.replaceState(null, "", q.toString() ? "?" + q.toString() : location.pathname);
    clearResult();
    showError("");
    if (!config && !q.get("model") && !q.get("params")) {
      $("empty").hidden = false;
      busy("");
      return;
    }
    const model = q.get("model") || "";
    const hub = !config && model.includes("/") && !catalogNames.has(model);
    busy(hub ? "looking up " + model + " on the hub..." : "estimating...");
    try {
      const est = await getJSON("/api/estimate", q, config);
      if (mine !== serial) return;  // a newer request is on its way
      if (!est.ok) {
        busy("");
        showError(est.data.error || ("HTTP " + est.status));
        return;
      }
      render(est.data, q, config);
      busy("comparing dtypes and GPUs...");
      const [m, c, g] = await Promise.all([getJSON("/api/model", q, config), getJSON("/api/compare", q, config),
                                           getJSON("/api/gpu-matrix", q, config)]);
      if (mine !== serial) return;
      if (m.ok) renderModel(m.data, est.data);
      if (c.ok) renderCompare(c.data);
      if (g.ok) renderGpus(g.data);
      if (fitAvailable && q.get("gpu")) {
        busy("searching for plans...");
        const fq = new URLSearchParams(q);
        fq.set("top", "5");
        const f = await getJSON("/api/fit", fq, config);
        if (f.status === 501) fitAvailable = false;
        if (mine !== serial) return;
        if (f.ok) renderPlans(f.data);
        else if (f.status !== 501) {
          $("plans-summary").textContent = "The advisor could not answer: " + (f.data.error || "HTTP " + f.status);
          $("plans-section").hidden = false;
        }
      }
      busy("");
    } catch (e) {
      if (mine === serial) {
        busy("");
        clearResult();
        showError("request failed: " + e);
      }
    }
  }

  function schedule() {
    clearTimeout(timer);
    showApplicable();
    timer = setTimeout(update, 200);
  }

  // ---- copy and downloads ------------------------------------------------------------------

  function save(blob, name) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }

  async function copyCli() {
    const text = $("cli").textContent;
    try {
      await navigator.clipboard.writeText(text);
      $("copied").textContent = "copied";
    } catch (e) {  // no clipboard permission: select the line so Ctrl+C copies it
      const range = document.createRange();
      range.selectNodeContents($("cli"));
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      $("copied").textContent = "selected: press Ctrl+C";
    }
  }

  $("copy-cli").addEventListener("click", copyCli);
  $("dl-json").addEventListener("click", () => {
    if (last) save(new Blob([JSON.stringify(last.data, null, 2) + "\n"], {type: "application/json"}), "vramlens-estimate.json");
  });
  $("dl-svg").addEventListener("click", () => {
    const svg = $("chart").querySelector("svg");
    if (svg) save(new Blob([new XMLSerializer().serializeToString(svg)], {type: "image/svg+xml"}), "vramlens-phases.svg");
  });
  $("dl-html").addEventListener("click", async () => {
    if (!last) return;
    busy("making the report...");
    try {
      const r = await call("/api/estimate.html", last.q, last.config);
      if (r.ok) save(await r.blob(), "vramlens-estimate.html");
      else showError((await r.json()).error || "HTTP " + r.status);
    } finally {
      busy("");
    }
  });

  async function fillLists() {
    try {
      const [models, gpus] = await Promise.all([fetch("/api/models"), fetch("/api/gpus")]);
      const ml = $("model-list");
      for (const m of await models.json()) {
        for (const name of [m.id, ...(m.aliases || [])]) {
          catalogNames.add(name);
          const o = document.createElement("option");
          o.value = name;
          o.label = m.id + (m.family || m.model_type ? " (" + (m.family || m.model_type) + ")" : "");
          ml.appendChild(o);
        }
      }
      const gl = $("gpu-list");
      for (const g of await gpus.json()) {
        const o = document.createElement("option");
        o.value = g.name;
        o.label = gib(g.usable_bytes) + " GiB";
        gl.appendChild(o);
      }
    } catch (e) {
      showError("could not load the catalogs: " + e);
    }
  }

  const source = loadFromURL();
  if (source === "config") $("config-box").open = true;
  showApplicable();
  form.addEventListener("submit", (e) => e.preventDefault());  // no inline handler: the CSP allows none
  form.addEventListener("input", schedule);
  form.addEventListener("change", schedule);
  fillLists();
  update();
})();
