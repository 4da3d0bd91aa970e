// The dashboard page: signs in with an API key (kept in sessionStorage for this tab only), then redraws the
// caller's deployments, metric charts, cost per day and recent failures every few seconds from /v1/dashboard.
// Plain DOM and SVG, no libraries: the gateway serves this file as is. Every text from the server is set as
// textContent, never parsed as HTML (model names and error messages come from users).
"use strict";

const KEY = "luminal-api-key";
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2f6fde", "#e08a1e", "#c2386b"];
let timer = null;
// Which sign-in (or window choice) the running refresh belongs to: a refresh still awaiting the server when the
// user signs out or starts another must neither show the board again nor schedule itself.
let session = 0;

class SignInRefused extends Error {}

async function api(path) {
  const response = await fetch(path, { headers: { Authorization: `Bearer ${sessionStorage.getItem(KEY)}` } });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401 || response.status === 403) throw new SignInRefused(body.error || response.statusText);
  if (!response.ok) throw new Error(`${path}: ${response.status} ${body.error || response.statusText}`);
  return body;
}

function el(tag, attributes = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  for (const child of children) node.append(child);
  return node;
}

function number(value, digits = 2) {
  return value === null || value === undefined ? "–" : String(Number(Number(value).toFixed(digits)));
}

// Costs are often fractions of a cent: three significant digits, however small.
function money(value) {
  return `$${value.toLocaleString("en-US", { maximumSignificantDigits: 3, maximumFractionDigits: 20 })}`;
}

// "1 error", "3 errors": `plural` names the things counted.
function counting(n, plural) {
  return `${n} ${n === 1 ? plural.slice(0, -1) : plural}`;
}

function clock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleTimeString();
}

// A line chart of `lines` ({name, values}) over the points' times; null values leave gaps.
function lineChart(title, unit, times, lines) {
  const width = 320, height = 130, pad = 28;
  const values = lines.flatMap((l) => l.values).filter((v) => v !== null);
  const top = Math.max(...values, 0) || 1;
  const start = times[0] ?? 0, span = (times[times.length - 1] ?? 1) - start || 1;
  const x = (t) => pad + ((t - start) / span) * (width - pad - 4);
  const y = (v) => height - 24 - (v / top) * (height - 34);
  const svg = el("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  svg.append(el("svg:text", { x: 2, y: 10 }, `${number(top)} ${unit}`), el("svg:text", { x: 2, y: height - 20 }, "0"));
  if (times.length) {  // the time axis: the first and the last point's times
    svg.append(el("svg:text", { x: pad, y: height - 4 }, clock(times[0])),
      el("svg:text", { x: width - 4, y: height - 4, "text-anchor": "end" }, clock(times.at(-1))));
  }
  lines.forEach((line, i) => {
    const segments = [[]];
    line.values.forEach((v, j) => (v === null ? segments.push([]) : segments.at(-1).push(`${x(times[j])},${y(v)}`)));
    for (const segment of segments.filter((s) => s.length)) {
      if (segment.length > 1) {
        svg.append(el("svg:polyline", { points: segment.join(" "), fill: "none", stroke: COLORS[i], "stroke-width": 1.5 }));
      } else {  // a lone point has no line to draw: a dot
        const [cx, cy] = segment[0].split(",");
        svg.append(el("svg:circle", { cx, cy, r: 2, fill: COLORS[i] }));
      }
    }
  });
  // The legend: each line's name in its color, with its latest value.
  const latest = lines.map((l, i) => {
    const name = el("span", {}, ` ${l.name} ${number(l.values.findLast((v) => v !== null))}`);
    name.style.color = COLORS[i];  // through the CSSOM: the page's CSP refuses style attributes
    return name;
  });
  return el("figure", { "data-chart": title }, svg, el("figcaption", {}, `${title} (${unit}), latest:`, ...latest));
}

function barChart(days) {
  const width = 40 + days.length * 28, height = 130;
  const top = Math.max(...days.map((d) => d.cost), 0) || 1;
  const svg = el("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  svg.append(el("svg:text", { x: 2, y: 10 }, money(top)));
  days.forEach((d, i) => {
    const h = (d.cost / top) * (height - 40);
    const bar = el("svg:rect", { x: 40 + i * 28, y: height - 22 - h, width: 20, height: h, fill: COLORS[0] });
    bar.append(el("svg:title", {}, `${d.day}: ${money(d.cost)}, ${d.requests} requests`));
    svg.append(bar, el("svg:text", { x: 44 + i * 28, y: height - 8 }, d.day.slice(8)));  // the day of the month
  });
  const total = days.reduce((sum, d) => sum + d.cost, 0);
  const requests = days.reduce((sum, d) => sum + d.requests, 0);
  return el("figure", { "data-chart": "cost" }, svg,
    el("figcaption", {}, `${money(total)} for ${requests} billed requests in ${days.length} days (UTC), `
      + `${days[0].day} to ${days.at(-1).day}`));
}

function renderDeployments(deployments) {
  const rows = deployments.map((d) => el("tr", { "data-deployment-id": d.id },
    el("td", {}, d.model), el("td", {}, String(d.version)),
    el("td", { class: `status-${d.status}`, title: d.error || "" }, d.status),
    el("td", {}, d.gpu_type), el("td", {}, d.traffic_percent === null ? "–" : `${d.traffic_percent}%`),
    el("td", {}, `${d.ready_replicas} / ${d.starting_replicas}`),
    el("td", {}, d.cold_start_seconds.length
      ? `${d.cold_start_seconds.length}, last ${number(d.cold_start_seconds.at(-1))} s` : "none")));
  document.querySelector("#deployments tbody").replaceChildren(...rows);
}

function renderFailures(failures) {
  const rows = failures.map((f) => el("tr", {},
    el("td", {}, clock(f.at)), el("td", {}, `${f.model} v${f.version}`),
    el("td", {}, String(f.status)), el("td", {}, f.reason), el("td", {}, f.message),
    el("td", {}, f.request_id || "–")));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 6 }, "No failed requests.")));
  document.querySelector("#failures tbody").replaceChildren(...rows);
}

// A tensor model's requests, latency and queue depth; a language model's sequences (those that got a first token),
// tokens/s and time to first token, which its gateway measures instead (its requests are streams, not batches).
function deploymentCharts(d, points) {
  const times = points.map((p) => p.at);
  const field = (name) => points.map((p) => p[name]);
  const perSecond = (name) => points.map((p) => (p[name] ?? 0) / p.seconds);
  const total = (name) => points.reduce((sum, p) => sum + (p[name] ?? 0), 0);
  const errors = lineChart("Errors", "/s", times, [{ name: "now", values: perSecond("errors") }]);
  const llm = d.kind === "llm";
  const counted = llm ? "sequences" : "requests";
  const charts = llm ? [
    lineChart("Sequences", "/s", times, [{ name: "now", values: perSecond("sequences") }]), errors,
    lineChart("Tokens", "/s", times, [{ name: "now", values: field("tokens_per_s") }]),
    lineChart("Time to first token", "ms", times, ["p50", "p95"].map((q) => ({ name: q, values: field(`ttft_${q}_ms`) }))),
  ] : [
    lineChart("Requests", "/s", times, [{ name: "now", values: perSecond("requests") }]), errors,
    lineChart("Latency", "ms", times, ["p50", "p95", "p99"].map((q) => ({ name: q, values: field(`latency_${q}_ms`) }))),
    lineChart("Queue depth", "requests", times, [{ name: "now", values: field("pending") }]),
  ];
  const heading = `${d.model} v${d.version}: ${counting(total(counted), counted)}, `
    + `${counting(total("errors"), "errors")} in the window`;
  return el("div", { class: "deployment-charts", "data-deployment-id": d.id },
    el("h3", {}, heading), el("div", { class: "chart-row" }, ...charts));
}

async function refresh() {
  const summary = await api("/v1/dashboard/summary");
  renderDeployments(summary.deployments);
  renderFailures(summary.failures);
  document.getElementById("cost").replaceChildren(barChart(summary.usage_by_day));
  const seconds = document.getElementById("window").value;
  const charts = await Promise.all(summary.deployments.map(async (d) => {
    const series = await api(`/v1/dashboard/deployments/${d.id}/series?window=${seconds}`);
    return deploymentCharts(d, series.points);
  }));
  if (!charts.length) charts.push(el("p", {}, "No deployments yet: deploy a model with `luminal deploy`."));
  document.getElementById("charts").replaceChildren(...charts);
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  return summary.sample_interval_s;
}

// Refreshes until signed out; a refused key ends the session and shows the sign-in form with the reason.
async function loop(mine = session) {
  let interval = 5;
  try {
    interval = await refresh();
    if (mine !== session) return;
    showBoard(true);
  } catch (error) {
    if (mine !== session) return;
    if (error instanceof SignInRefused) return signOut(`The API key was refused: ${error.message}`);
    document.getElementById("updated").textContent = `refresh failed: ${error.message}`;
  }
  timer = setTimeout(() => loop(mine), Math.min(Math.max(interval, 1), 10) * 1000);
}

// Ends the running refreshes' turn: the next loop() is the only one that draws and reschedules.
function restart() {
  clearTimeout(timer);
  session += 1;
  loop();
}

function showBoard(signedIn) {
  document.getElementById("board").hidden = !signedIn;
  document.getElementById("sign-out").hidden = !signedIn;
  document.getElementById("sign-in").hidden = signedIn;
}

function signOut(message = "") {
  clearTimeout(timer);
  session += 1;
  sessionStorage.removeItem(KEY);
  showBoard(false);
  document.getElementById("sign-in-error").textContent = message;
}

document.getElementById("sign-in").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, document.getElementById("api-key").value.trim());
  document.getElementById("sign-in-error").textContent = "";
  restart();
});
document.getElementById("sign-out").addEventListener("click", () => signOut());
document.getElementById("window").addEventListener("change", () => restart());
if (sessionStorage.getItem(KEY)) loop();
