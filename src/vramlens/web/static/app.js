// vramlens page: knobs -> /api/estimate -> total, verdict, chart, table. State lives in the URL.
"use strict";
(function () {
  const form = document.getElementById("knobs");
  const $ = (id) => document.getElementById(id);
  const GiB = 1024 ** 3;
  const gib = (n) => (n / GiB).toFixed(2);
  const fields = Array.from(form.querySelectorAll("[data-param]"));
  let serial = 0;
  let timer = null;
  let fitAvailable = true;
  const catalogNames = new Set();

  // While a hub id (org/name, not in the catalog) is being looked up, say so: it can take seconds.
  function showLooking(model) {
    const el = $("status");
    el.textContent = model ? "looking up " + model + " on the hub..." : "";
    el.hidden = !model;
  }

  function value(el) {
    if (el.type === "checkbox") return el.checked ? "true" : "false";
    return el.value.trim();
  }

  // Parameters that differ from their defaults, so links stay short.
  function params() {
    const p = new URLSearchParams();
    for (const el of fields) {
      const v = value(el);
      if (v !== "" && v !== el.dataset.default) p.set(el.dataset.param, v);
    }
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
  }

  function showError(msg) {
    $("error").textContent = msg;
    $("error").hidden = !msg;
  }

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }

  function render(d) {
    $("total").textContent = gib(d.device_total_bytes);
    $("total").dataset.bytes = String(d.device_total_bytes);
    const v = $("verdict");
    if (d.fits === null || d.fits === undefined) {
      v.className = "verdict unknown";
      v.textContent = "no GPU chosen";
    } else {
      v.className = "verdict " + (d.fits ? "fits" : "nofit");
      v.textContent = (d.fits ? "FITS" : "DOES NOT FIT") + " on " + d.gpu.name + " (" + gib(d.gpu.usable_bytes) +
        " GiB; " + gib(Math.abs(d.headroom_bytes)) + " GiB " + (d.headroom_bytes >= 0 ? "to spare)" : "too much)");
    }
    $("advice").textContent = d.advice || "";
    const body = $("components").querySelector("tbody");
    body.replaceChildren();
    for (const [name, bytes] of Object.entries(d.components)) {
      if (!bytes) continue;
      const tr = document.createElement("tr");
      cell(tr, name.replace(/_/g, " "));
      cell(tr, gib(bytes), "num");
      cell(tr, (d.explanations || {})[name] || "");
      body.appendChild(tr);
    }
  }

  // The settings a plan changes, compared with the knobs as they are now.
  function planLabel(settings) {
    const now = {};
    for (const el of fields) now[el.dataset.param] = value(el) || el.dataset.default;
    const diff = [];
    for (const [k, v] of Object.entries(settings)) {
      const mine = k in now ? now[k] : undefined;
      if (mine !== undefined && String(v === null ? "" : v) !== String(mine)) diff.push(k + "=" + v);
    }
    return diff.join(" ") || "as given";
  }

  function renderPlans(d) {
    const plans = (d && d.plans) || [];
    const body = $("plans").querySelector("tbody");
    body.replaceChildren();
    plans.slice(0, 5).forEach((p, i) => {
      const tr = document.createElement("tr");
      cell(tr, String(i + 1));
      cell(tr, p.name || p.label || planLabel(p.settings || {}));
      cell(tr, p.device_total_bytes !== undefined ? gib(p.device_total_bytes) : "", "num");
      cell(tr, p.fits === undefined ? "" : (p.fits ? "yes" : "no"));
      body.appendChild(tr);
    });
    $("plans-section").hidden = plans.length === 0;
  }

  async function call(path, q, config) {
    if (config) {
      const body = Object.fromEntries(q.entries());
      for (const k of Object.keys(body)) {
        if (/^\d+$/.test(body[k])) body[k] = Number(body[k]);
        else if (body[k] === "true" || body[k] === "false") body[k] = body[k] === "true";
      }
      if (body.headroom) body.headroom = Number(body.headroom);
      delete body.model;
      body.config = config;
      return fetch(path, {method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(body)});
    }
    return fetch(path + "?" + q.toString());
  }

  async function update() {
    const mine = ++serial;
    const q = params();
    const config = $("f-config").value.trim();
    history.replaceState(null, "", q.toString() ? "?" + q.toString() : location.pathname);
    $("json-link").href = "/api/estimate?" + q.toString();
    if (!config && !q.get("model") && !q.get("params")) {
      showError("");
      return;
    }
    const model = q.get("model") || "";
    const hub = !config && model.includes("/") && !catalogNames.has(model);
    showLooking(hub ? model : "");
    try {
      const r = await call("/api/estimate", q, config);
      const d = await r.json();
      if (mine !== serial) return;  // a newer request is on its way
      showLooking("");
      if (!r.ok) {
        showError(d.error || ("HTTP " + r.status));
        return;
      }
      showError("");
      render(d);
      const s = await call("/api/estimate.svg", q, config);
      if (mine === serial && s.ok) $("chart").innerHTML = await s.text();  // SVG made by our server, text escaped
      if (fitAvailable) {
        const f = await call("/api/fit", new URLSearchParams([...q.entries(), ["top", "5"]]), config);
        if (f.status === 501) fitAvailable = false;
        if (mine === serial) renderPlans(f.ok ? await f.json() : null);
      }
    } catch (e) {
      if (mine === serial) {
        showLooking("");
        showError("request failed: " + e);
      }
    }
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(update, 200);
  }

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

  loadFromURL();
  form.addEventListener("submit", (e) => e.preventDefault());  // no inline handler: the CSP allows none
  form.addEventListener("input", schedule);
  form.addEventListener("change", schedule);
  fillLists();
  update();
})();
