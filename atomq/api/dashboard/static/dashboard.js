// The dashboard's only script: refreshes a page's numbers and its rate chart.
//
// A page names its JSON endpoint in <body data-live-url> and marks each number
// with data-live="<key>" (meters with data-live-meter="<key>"); every
// data-refresh-ms this fetches the endpoint and sets those elements from its
// "text" and "meters". Only numbers change, so forms and checkbox selections
// stay as they are. A queue page's endpoint adds "rates", drawn here as an SVG
// chart into #rate-chart and written into #rate-rows as a table; the overview's
// adds "platform_rates", drawn into #platform-chart and #platform-rows; a
// listener's adds "execution_rates", drawn into #execution-chart.
"use strict";

(function () {
  const body = document.body;
  const url = body.dataset.liveUrl;
  const every = Number(body.dataset.refreshMs) || 3000;
  const SVG = "http://www.w3.org/2000/svg";
  const BUCKET_S = 10;

  // Every time the dashboard writes is UTC, said so, as the server writes its own (formatting.when).
  function utc(date) {
    return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

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
    if (live.platform_rates) drawPlatform(live.platform_rates);
    if (live.execution_rates) drawExecutions(live.execution_rates);
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

  // A line per series over time: `times` in epoch seconds, `series` as [[name, values]]; each
  // line's class is its name, so the styles tell them apart even where they overlap. The x axis
  // runs from `from` (by default the first time) to the last time.
  function lineChart(area, times, series, label, from = times[0]) {
    const width = 640, height = 220, left = 48, right = 12, top = 12, bottom = 28;
    const max = niceMax(Math.max(0, ...series.flatMap(([, values]) => values)));
    const first = from;
    const span = Math.max(1, times[times.length - 1] - first);
    const x = (t) => left + ((t - first) * (width - left - right)) / span;
    const y = (v) => top + (height - top - bottom) * (1 - v / max);

    const chart = document.createElementNS(SVG, "svg");
    chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
    chart.setAttribute("role", "img");
    chart.setAttribute("aria-label", label);
    for (const fraction of [0, 0.5, 1]) {
      const value = max * fraction;
      svg("line", { x1: left, x2: width - right, y1: y(value), y2: y(value), class: "grid" }, chart);
      svg("text", { x: left - 6, y: y(value) + 4, class: "tick", "text-anchor": "end" }, chart).textContent =
        value % 1 ? value.toFixed(1) : String(value);
    }
    for (const [t, text, anchor] of [[first, `-${Math.max(1, Math.round(span / 60))} min`, "start"],
                                     [times[times.length - 1], "now", "end"]]) {
      svg("text", { x: x(t), y: height - 8, class: "tick", "text-anchor": anchor }, chart).textContent = text;
    }
    for (const [name, values] of series) {
      const points = values.map((v, i) => `${x(times[i]).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
      svg("polyline", { points, class: `line ${name}` }, chart);
    }
    area.replaceChildren(chart);
  }

  function drawChart(rates) {
    const area = document.getElementById("rate-chart");
    if (!area) return;
    if (!rates.length) {
      area.textContent = "No rates recorded.";
      return;
    }
    const last = rates[rates.length - 1];
    lineChart(area, rates.map((b) => b.start),
      [["sent", rates.map((b) => b.sent / BUCKET_S)], ["acked", rates.map((b) => b.acked / BUCKET_S)]],
      `Rates over the last ${Math.round((rates.length * BUCKET_S) / 60)} minutes; ` +
      `latest 10 seconds: ${last.sent / BUCKET_S} sent and ${last.acked / BUCKET_S} acked per second`);
  }

  // A listener's page: its executions and failed ones a second, in 10-second buckets.
  function drawExecutions(rates) {
    const area = document.getElementById("execution-chart");
    if (!area || !rates.length) return;
    const last = rates[rates.length - 1];
    lineChart(area, rates.map((b) => b.start),
      [["executions", rates.map((b) => b.executions / BUCKET_S)], ["failures", rates.map((b) => b.failures / BUCKET_S)]],
      `Executions over the last ${Math.round((rates.length * BUCKET_S) / 60)} minutes; latest 10 seconds: ` +
      `${last.executions} finished, ${last.failures} failed`);
  }

  const PLATFORM_SERIES = ["sent", "delivered", "acked", "dead_lettered", "refused"];
  const HOUR_S = 3600;

  function perSecond(value) {
    return value >= 10 ? value.toFixed(0) : value.toFixed(value >= 1 ? 1 : 2);
  }

  // The overview's chart and table of the platform's rates, one point per sampled interval.
  function drawPlatform(rates) {
    const area = document.getElementById("platform-chart");
    if (area) {
      if (!rates.length) {
        area.textContent = "No rates yet: they come with the second sample of the platform.";
      } else {
        const last = rates[rates.length - 1];
        lineChart(area, rates.map((r) => r.at), PLATFORM_SERIES.map((name) => [name, rates.map((r) => r[name])]),
          "Messages per second over the last hour; latest: " +
          PLATFORM_SERIES.map((name) => `${perSecond(last[name])} ${name.replace("_", "-")}`).join(", "),
          last.at - HOUR_S);
      }
    }
    const rows = document.getElementById("platform-rows");
    if (!rows) return;
    rows.replaceChildren(...rates.slice().reverse().map((r) => {
      const row = document.createElement("tr");
      const reasons = Object.entries(r.refused_by_reason).map(([kind, n]) => `${kind} ${perSecond(n)}`).join(", ");
      const cells = [utc(new Date(r.at * 1000)), ...PLATFORM_SERIES.slice(0, 4).map((name) => perSecond(r[name])),
                     perSecond(r.refused) + (reasons ? ` (${reasons})` : "")];
      for (const value of cells) {
        const cell = document.createElement("td");
        cell.textContent = value;
        row.appendChild(cell);
      }
      return row;
    }));
  }

  function writeRates(rates) {
    const rows = document.getElementById("rate-rows");
    if (!rows) return;
    rows.replaceChildren(...rates.map((b) => {
      const row = document.createElement("tr");
      const start = utc(new Date(b.start * 1000));
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
        setStatus(`Updated at ${utc(new Date()).slice(11)}; refreshes every ${every / 1000} s.`);
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
