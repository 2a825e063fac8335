// The status page: polls /debug/status every two seconds and draws it.
// Rates are the change between two polls.
"use strict";

const POLL_MS = 2000;
let previous = null;

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function ms(seconds) {
  return seconds === null || seconds === undefined ? "–" : (seconds * 1000).toFixed(2) + " ms";
}

function rate(now, before, seconds) {
  if (before === undefined || seconds <= 0) return "–";
  return ((now - before) / seconds).toFixed(1) + "/s";
}

function total(counts) {
  return Object.values(counts || {}).reduce((sum, count) => sum + count, 0);
}

function drawChain(status, before, seconds) {
  const chain = document.getElementById("chain");
  chain.replaceChildren();
  for (const step of status.chain) {
    const timing = step.timed_as === null
      ? el("div", { class: "latency" }, "not timed")
      : el("div", { class: "latency" }, `p50 ${ms(step.p50_seconds)} · p99 ${ms(step.p99_seconds)} · ${step.count} timed`);
    const item = el("li", { class: step.timed_as === null ? "step untimed" : "step", "data-step": step.step },
      el("h3", {}, step.step), timing);
    const old = before && before.chain.find((s) => s.step === step.step);
    for (const filter of step.filters) {
      const oldFilter = old && old.filters.find((f) => f.name === filter.name);
      const calls = total(filter.calls);
      const outcomes = el("div", { class: "outcomes" });
      for (const [outcome, count] of Object.entries(filter.calls)) {
        const bad = outcome !== "answer" && count > 0;
        outcomes.append(el("span", { class: bad ? "bad" : "", "data-outcome": outcome }, `${outcome} ${count}`));
      }
      item.append(el("div", { class: "filter", "data-filter": filter.name },
        el("div", {}, el("span", { class: "name" }, filter.name),
          ` ${filter.kind} ${filter.isolation} ${filter.mode}`.replace(/\s+/g, " ")),
        el("div", { class: "rate" }, `${calls} calls · ${rate(calls, oldFilter && total(oldFilter.calls), seconds)}`),
        el("div", { class: "latency" }, `p50 ${ms(filter.p50_seconds)} · p99 ${ms(filter.p99_seconds)}`),
        outcomes));
    }
    chain.append(item);
  }
}

function drawServers(status) {
  const servers = document.getElementById("servers");
  servers.replaceChildren();
  for (const server of status.servers) {
    const rows = el("tbody");
    for (const route of server.routes) {
      if (route.upstream === null) {
        rows.append(el("tr", { "data-route": route.route }, el("td", {}, route.route), el("td", { colspan: 5 }, "static")));
        continue;
      }
      const errors = total(route.errors);
      rows.append(el("tr", { "data-route": route.route },
        el("td", {}, route.route),
        el("td", {}, route.upstream),
        el("td", { class: "responses" }, Object.entries(route.responses).filter(([, n]) => n > 0).map(([c, n]) => `${c} ${n}`).join(", ") || "none"),
        el("td", { class: errors > 0 || route.openapi_v3_dropped > 0 ? "failing" : "healthy" },
          [errors > 0 ? `${errors} errors` : "healthy",
            route.openapi_v3_dropped > 0 ? `${route.openapi_v3_dropped} OpenAPI v3 group versions dropped` : null]
            .filter((note) => note !== null).join("; ")),
        el("td", {}, `p50 ${ms(route.p50_seconds)}`),
        el("td", {}, `p99 ${ms(route.p99_seconds)}`)));
    }
    servers.append(el("h3", { "data-server": server.name }, `server ${server.name}`),
      el("table", {}, el("thead", {}, el("tr", {}, ...["route", "upstream", "responses", "health", "p50", "p99"].map((h) => el("th", {}, h)))), rows));
  }
}

function drawReloads(status) {
  const body = document.querySelector("#reloads tbody");
  body.replaceChildren();
  for (const reload of status.reloads) {
    body.append(el("tr", { class: reload.result === "failure" ? "failing" : "" },
      el("td", {}, new Date(reload.at_unix * 1000).toISOString()),
      el("td", {}, reload.result),
      el("td", {}, reload.generation ?? "–"),
      el("td", {}, el("pre", {}, reload.error ?? ""))));
  }
}

function drawFlowControl(status) {
  const section = document.getElementById("flow-control");
  if (status.flow_control === null) {
    section.replaceChildren(el("p", {}, "not configured: max-in-flight limits instead"));
    return;
  }
  const rows = el("tbody");
  for (const level of status.flow_control) {
    if (level.exempt) {
      rows.append(el("tr", { "data-level": level.name }, el("td", {}, level.name),
        el("td", { colspan: 7 }, `exempt · ${level.executing} executing`)));
      continue;
    }
    const busy = level.queues.filter((queue) => queue.waiting > 0).length;
    rows.append(el("tr", { "data-level": level.name },
      el("td", {}, level.name),
      el("td", {}, `${level.seats_in_use} / ${level.nominal_seats}`),
      el("td", {}, level.executing),
      el("td", {}, level.waiting),
      el("td", { class: "dispatched" }, level.dispatched),
      el("td", { class: level.rejected > 0 ? "failing" : "" }, level.rejected + level.timed_out),
      el("td", {}, level.queues.length === 0 ? "no queuing" : `${busy} of ${level.queues.length} waiting`)));
  }
  section.replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ...["level", "seats in use", "executing", "waiting", "dispatched", "rejected", "queues"].map((h) => el("th", {}, h)))),
    rows));
}

async function poll() {
  try {
    const response = await fetch("/debug/status", { credentials: "same-origin" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const status = await response.json();
    const seconds = previous ? (status.now_ms - previous.now_ms) / 1000 : 0;
    document.getElementById("generation").textContent = `generation ${status.generation}`;
    document.getElementById("revision").textContent =
      (status.config_revision === null ? "manifest file" : `etcd revision ${status.config_revision}`) +
      (status.config_watch_down_since == null ? ""
        : ` (watch down since ${new Date(status.config_watch_down_since * 1000).toISOString()})`);
    document.getElementById("requests").textContent =
      "requests " + Object.entries(status.requests).map(([code, n]) => `${code}: ${n}`).join(", ");
    drawChain(status, previous, seconds);
    drawServers(status);
    drawReloads(status);
    drawFlowControl(status);
    document.getElementById("updated").textContent = "updated " + new Date(status.now_ms).toISOString();
    document.body.setAttribute("data-polled", String(Number(document.body.getAttribute("data-polled") || 0) + 1));
    previous = status;
  } catch (error) {
    document.getElementById("updated").textContent = `cannot poll: ${error.message}`;
  }
}

poll();
setInterval(poll, POLL_MS);
