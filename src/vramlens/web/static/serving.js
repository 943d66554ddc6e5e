// vramlens page, Serving tab: the form -> GET /api/capacity -> the engine's log-style figures and concurrency.
(function () {
  "use strict";
  const form = document.getElementById("serving-form");
  if (!form) return;
  const engine = document.getElementById("s-engine");
  const errorBox = document.getElementById("serving-error");
  const result = document.getElementById("serving-result");

  // only the settings of the chosen engine are shown and sent
  function showSettings() {
    for (const label of form.querySelectorAll("label[data-engine]")) {
      label.hidden = !label.dataset.engine.split(" ").includes(engine.value);
    }
  }

  function query() {
    const q = new URLSearchParams();
    for (const input of form.querySelectorAll("input, select")) {
      const label = input.closest("label");
      if (input.value === "" || (label && label.hidden)) continue;
      q.set(input.name, input.value);
    }
    return q;
  }

  function fmt(v) {
    return typeof v === "number" ? v.toLocaleString("en-US", { maximumFractionDigits: 2 }) : String(v);
  }

  function render(data) {
    const body = document.querySelector("#serving-figures tbody");
    body.replaceChildren();
    for (const [key, f] of Object.entries(data.figures)) {
      const tr = document.createElement("tr");
      tr.dataset.key = key;
      const name = document.createElement("td");
      name.textContent = f.label;
      const value = document.createElement("td");
      value.className = "num";
      value.textContent = fmt(f.value);
      tr.append(name, value);
      body.append(tr);
    }
    const summary = document.getElementById("serving-summary");
    summary.dataset.concurrency = String(data.concurrency);
    summary.textContent = `${data.model} on ${data.gpus} x ${data.gpu} (tp ${data.tp}) in ${data.engine}: ` +
      `${fmt(data.concurrency)} requests of ${fmt(data.context)} tokens fit the cache; ` +
      `${fmt(data.decode_tokens_s)} tokens/s each, ${fmt(data.decode_tokens_s_total)} in total (${data.accounting}).`;
    if (data.speculative) {
      summary.textContent += ` Speculative: ${data.speculative.setup}; the draft's weights ` +
        `${fmt(data.speculative.draft_weights_bytes / 2 ** 30)} GiB and KV cache ` +
        `${fmt(data.speculative.draft_kv_cache_bytes / 2 ** 30)} GiB are in the figures.`;
    }
    result.hidden = false;
  }

  async function run(event) {
    if (event) event.preventDefault();
    errorBox.hidden = true;
    const r = await fetch("/api/capacity?" + query().toString());
    const data = await r.json();
    if (!r.ok) {
      result.hidden = true;
      errorBox.textContent = data.error;
      errorBox.hidden = false;
      return;
    }
    render(data);
  }

  engine.addEventListener("change", showSettings);
  form.addEventListener("submit", run);
  showSettings();
})();
