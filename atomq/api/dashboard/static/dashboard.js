// The dashboard's only script: refreshes a page's numbers and its rate chart.
//
// A page names its JSON endpoint in <body data-live-url> and marks each number
// with data-live="<key>" (meters with data-live-meter="<key>"); every
// data-refresh-ms this fetches the endpoint and sets those elements from its
// "text" and "meters". Only numbers change, so forms and checkbox selections
// stay as they are. A queue page's endpoint adds "rates", drawn here as an SVG
// chart into #rate-chart and written into #rate-rows as a table.
"use strict";

(function () {
  const body = document.body;
  const url = body.dataset.liveUrl;
  const every = Number(body.dataset.refreshMs) || 3000;
  const SVG = "http://www.w3.org/2000/svg";
  const BUCKET_S = 10;

  function setStatus(text) {
    const status = document.querySelector("[data-live-status]");
    if (status) status.textContent = text;
  }

  function apply(live) {
    const text = live.text || {};
    const meters = live.meters || {};
    for (const el of document.querySelectorAll("[data-live]")) {
      const value = text[el.dataset.live];
      if (value !== undefined && el.textContent !== value) el.textContent = value;
    }
    for (const el of document.querySelectorAll("[data-live-meter]")) {
      const value = meters[el.dataset.liveMeter];
      if (value) {
        el.max = value[1];
        el.value = value[0];
      }
    }
    if (live.rates) {
      drawChart(live.rates);
      writeRates(live.rates);
    }
  }

  function svg(name, attributes, parent) {
    const el = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attributes)) el.setAttribute(key, String(value));
    parent.appendChild(el);
    return el;
  }

  function niceMax(value) {
    if (value <= 1) return 1;
    const magnitude = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 5, 10]) {
      if (value <= step * magnitude) return step * magnitude;
    }
    return 10 * magnitude;
  }

  function drawChart(rates) {
    const area = document.getElementById("rate-chart");
    if (!area) return;
    if (!rates.length) {
      area.textContent = "No rates recorded.";
      return;
    }
    const width = 640, height = 220, left = 48, right = 12, top = 12, bottom = 28;
    const sent = rates.map((b) => b.sent / BUCKET_S);
    const acked = rates.map((b) => b.acked / BUCKET_S);
    const max = niceMax(Math.max(0, ...sent, ...acked));
    const x = (i) => left + (rates.length < 2 ? 0 : (i * (width - left - right)) / (rates.length - 1));
    const y = (v) => top + (height - top - bottom) * (1 - v / max);

    const chart = document.createElementNS(SVG, "svg");
    chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
    chart.setAttribute("role", "img");
    const last = rates[rates.length - 1];
    chart.setAttribute("aria-label", `Rates over the last ${Math.round((rates.length * BUCKET_S) / 60)} minutes; ` +
      `latest 10 seconds: ${last.sent / BUCKET_S} sent and ${last.acked / BUCKET_S} acked per second`);
    for (const fraction of [0, 0.5, 1]) {
      const value = max * fraction;
      svg("line", { x1: left, x2: width - right, y1: y(value), y2: y(value), class: "grid" }, chart);
      svg("text", { x: left - 6, y: y(value) + 4, class: "tick", "text-anchor": "end" }, chart).textContent =
        value % 1 ? value.toFixed(1) : String(value);
    }
    const span = rates.length * BUCKET_S;
    for (const [i, label] of [[0, `-${Math.round(span / 60)} min`], [rates.length - 1, "now"]]) {
      svg("text", { x: x(i), y: height - 8, class: "tick", "text-anchor": i ? "end" : "start" }, chart).textContent = label;
    }
    for (const [series, name] of [[sent, "sent"], [acked, "acked"]]) {
      const points = series.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
      svg("polyline", { points, class: `line ${name}` }, chart);
    }
    area.replaceChildren(chart);
  }

  function writeRates(rates) {
    const rows = document.getElementById("rate-rows");
    if (!rows) return;
    rows.replaceChildren(...rates.map((b) => {
      const row = document.createElement("tr");
      const start = new Date(b.start * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
      for (const value of [start, b.sent, b.acked]) {
        const cell = document.createElement("td");
        cell.textContent = String(value);
        row.appendChild(cell);
      }
      return row;
    }));
  }

  async function refresh() {
    try {
      const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.status === 401) {
        window.location.reload(); // the session ended: the reload lands on the sign-in page
        return;
      }
      if (!response.ok) {
        setStatus(response.status === 404 ? "This no longer exists; the numbers are as last seen."
          : `Refreshing failed (${response.status}); trying again.`);
      } else {
        apply(await response.json());
        setStatus(`Updated at ${new Date().toLocaleTimeString()}; refreshes every ${every / 1000} s.`);
      }
    } catch (error) {
      setStatus("Refreshing failed (no answer); trying again.");
    }
    window.setTimeout(refresh, every);
  }

  // A checkbox in a table's header selects or clears every checkbox of that name in its form.
  for (const all of document.querySelectorAll("[data-select-all]")) {
    all.addEventListener("change", () => {
      for (const box of all.form.querySelectorAll(`input[type=checkbox][name="${all.dataset.selectAll}"]`)) {
        box.checked = all.checked;
      }
    });
  }

  if (url) refresh();
})();
