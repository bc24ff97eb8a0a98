// The dashboard's pages: the overview, a cluster, a managed job (a service's page and the
// overview's services and pools are in serving.js, which uses the helpers this file puts in
// GL.ui). Each reads the server's JSON API with the session cookie (GET only) and redraws every
// REFRESH_MS. DOM built with createElement/textContent only (no innerHTML: names and reasons
// come from users).
"use strict";
window.GL = window.GL || {};
(function (GL) {
  GL.pages = GL.pages || {};
  const REFRESH_MS = 10000;
  const HOUR_S = 3600;  // the telemetry routes' default window (asked without ?since=: the last
                        // hour at 10 s; a since a hair older than the 10 s retention gets 60 s)
  const app = document.getElementById("app");
  const page = document.body.dataset.page;
  const params = new URLSearchParams(location.search);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === "class") node.className = v; else node.setAttribute(k, String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  async function api(path) {
    const answer = await fetch(path, {credentials: "same-origin",
                                      headers: {Accept: "application/json"}});
    if (answer.status === 401) throw new Error("not logged in: run `gpulease dashboard`");
    if (!answer.ok) {
      let message = "HTTP " + answer.status;
      try { message = (await answer.json()).error.message; } catch (e) { /* not JSON */ }
      const error = new Error(path + ": " + message);
      error.status = answer.status;
      throw error;
    }
    return answer.json();
  }

  const money = (v) => (v === null || v === undefined ? "–" : "$" + Number(v).toFixed(2) + "/h");
  const usd = (v) => (v === null || v === undefined ? "–" : "$" + Number(v).toFixed(2));
  const pct = (v) => (v === null || v === undefined ? "–" : Number(v).toFixed(0) + " %");
  const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "–");
  const ago = (t) => (t ? Math.max(0, Math.round(Date.now() / 1000 - t)) + " s ago" : "–");
  const status = (s) => el("span", {class: "status " + (s || "")}, s || "–");
  const where = (c) => [c.provider, c.region, c.zone].filter(Boolean).join("/") || "–";
  const fact = (label, value) => el("div", {}, el("span", {}, label), value);

  function table(headers, rows, id) {
    return el("table", {id},
      el("thead", {}, el("tr", {}, headers.map((h) =>
        el("th", {class: h.endsWith(" ") ? "num" : null}, h.trim())))),
      el("tbody", {}, rows.length ? rows : [el("tr", {}, el("td", {colspan: headers.length,
                                                              class: "muted"}, "none"))]));
  }

  const num = (...c) => el("td", {class: "num"}, ...c);
  const td = (...c) => el("td", {}, ...c);
  GL.ui = {el, api, table, num, td, money, usd, when, status, fact, HOUR_S, params};

  // ---- telemetry -> chart series ----------------------------------------------------------

  function gpuSeries(nodes, figure) {
    const series = new Map();
    for (const node of nodes || []) {
      for (const point of node.points || []) {
        for (const gpu of point.gpus || []) {
          const name = (node.cluster ? node.cluster + " " : "") +
                       "node " + node.node_rank + " GPU " + gpu.index;
          if (!series.has(name)) series.set(name, []);
          series.get(name).push([point.at, figure(gpu)]);
        }
      }
    }
    return [...series].map(([name, points]) => ({name, points}));
  }

  function trainSeries(nodes, figure, label) {
    return (nodes || []).map((node) => ({
      name: ((node.cluster ? node.cluster + " " : "") + "node " + node.node_rank + " " +
             label).trim(),
      points: (node.points || []).filter((p) => p.train).map((p) => [p.at, figure(p.train)]),
    }));
  }

  const memPct = (g) => (g.memory_used_mb !== null && g.memory_total_mb
                           ? (100 * g.memory_used_mb) / g.memory_total_mb : null);

  // ---- pages ------------------------------------------------------------------------------

  async function overview() {
    const [clusters, jobs, serving] = await Promise.all([api("/v1/clusters"), api("/v1/jobs"),
                                                         GL.servingSections()]);
    let latest = {clusters: []};
    try { latest = await api("/v1/telemetry/latest"); } catch (e) { /* no relay yet */ }
    const util = new Map(latest.clusters.map((c) => [c.cluster, c.gpu_utilization_pct]));
    const price = new Map(clusters.clusters.map((c) => [c.name, c.price_per_hour]));
    const gpus = (c) => (c.accelerator ? c.accelerator + ":" + c.gpus_per_node : "–") +
                        (c.num_nodes > 1 ? " × " + c.num_nodes + " nodes" : "");
    return [
      el("h1", {}, "Clusters"),
      table(["name", "status", "where", "instance type", "GPUs", "GPU util ", "$/h "],
        clusters.clusters.map((c) => el("tr", {"data-cluster": c.name},
          td(el("a", {href: "/ui/cluster?name=" + encodeURIComponent(c.name)}, c.name)),
          td(status(c.status)), td(where(c)), td(c.instance_type || "–"), td(gpus(c)),
          num(pct(util.get(c.name))), num(money(c.price_per_hour)))), "clusters"),
      el("h2", {}, "Managed jobs"),
      table(["id ", "name", "status", "attempt ", "cluster", "where", "recoveries ", "spent ",
             "$/h "],
        jobs.jobs.map((j) => el("tr", {"data-job": j.id},
          num(el("a", {href: "/ui/job?id=" + j.id}, "#" + j.id)), td(j.name || "–"),
          td(status(j.status)), num(j.attempt), td(j.cluster || "–"), td(j.where || "–"),
          num(j.recoveries), num(usd(j.cost && j.cost.spent_usd)),
          num(money(j.cluster ? price.get(j.cluster) : null)))), "jobs"),
      ...serving,
    ];
  }

  async function clusterPage() {
    const name = params.get("name") || "";
    const path = "/v1/clusters/" + encodeURIComponent(name);
    const since = Date.now() / 1000 - HOUR_S;
    const [c, tele] = await Promise.all([api(path + "?history=true"),
                                         api(path + "/telemetry")]);
    const lastSeen = new Map((tele.nodes || []).map((n) => [n.node_rank,
                                                            (n.points || []).slice(-1)[0]]));
    const charts = el("div", {class: "charts"});
    GL.lineChart(charts, {id: "gpu-util", title: "GPU utilisation", unit: "%", yMax: 100, since,
                          series: gpuSeries(tele.nodes, (g) => g.utilization_pct)});
    GL.lineChart(charts, {id: "gpu-memory", title: "GPU memory used", unit: "%", yMax: 100, since,
                          series: gpuSeries(tele.nodes, memPct)});
    const history = (c.history || []).slice().reverse();
    return [
      el("h1", {}, "Cluster " + c.name + " ", status(c.status)),
      el("div", {class: "facts"},
        fact("where", where(c)), fact("instance type", c.instance_type || "–"),
        fact("GPUs", (c.accelerator || "–") + ":" + c.gpus_per_node + " × " + c.num_nodes),
        fact("pricing", c.pricing || "–"), fact("$/h", money(c.price_per_hour)),
        fact("created", when(c.created_at)), fact("reason", c.reason || "–")),
      el("h2", {}, "GPUs over the last hour"),
      charts,
      el("h2", {}, "Nodes"),
      table(["rank ", "state", "instance", "provider", "last heartbeat", "GPU util ", "CPU ",
             "exit "],
        c.nodes.map((n) => {
          const point = lastSeen.get(n.rank);
          const gpus = point ? point.gpus || [] : [];
          const util = gpus.length ? gpus.reduce((a, g) => a + (g.utilization_pct || 0), 0) /
                                     gpus.length : null;
          return el("tr", {"data-rank": n.rank}, num(n.rank), td(status(n.state)),
            td(n.instance_id || "–"), td(n.provider), td(ago(n.last_heartbeat_at)),
            num(pct(util)), num(pct(point && point.node ? point.node.cpu_pct : null)),
            num(n.exit_code === null ? "–" : n.exit_code));
        }), "nodes"),
      el("h2", {}, "Events"),
      table(["at", "from", "to", "reason"], history.map((h) => el("tr", {},
        td(when(h.at)), td(h.from || "–"), td(status(h.to)), td(h.reason || ""))), "events"),
    ];
  }

  function checkpoints(nodes) {
    const seen = new Map();
    for (const node of nodes || []) {
      for (const p of node.points || []) {
        const t = p.train;
        if (t && t.checkpoint_step !== null && t.checkpoint_step !== undefined &&
            !seen.has(t.checkpoint_step)) {
          seen.set(t.checkpoint_step, [node.cluster || "", t.checkpoint_at]);
        }
      }
    }
    return [...seen].sort((a, b) => b[0] - a[0]);
  }

  async function jobPage() {
    const id = Number(params.get("id"));
    const since = Date.now() / 1000 - HOUR_S;
    const [j, tele] = await Promise.all([
      api("/v1/jobs/" + id + "?history=true"),
      api("/v1/jobs/" + id + "/telemetry"),
    ]);
    let price = null;
    if (j.cluster) {
      try { price = (await api("/v1/clusters/" + encodeURIComponent(j.cluster))).price_per_hour; }
      catch (e) { /* the attempt's cluster is gone */ }
    }
    const rate = (t) => (t.tokens_per_s !== null && t.tokens_per_s !== undefined
                           ? t.tokens_per_s : t.samples_per_s);
    const anyTokens = (tele.nodes || []).some((n) => (n.points || []).some((p) =>
      p.train && p.train.tokens_per_s !== null && p.train.tokens_per_s !== undefined));
    const charts = el("div", {class: "charts"});
    const untold = "not reported (gpulease.train tells the agent)";
    GL.lineChart(charts, {id: "throughput", title: "Throughput", empty: untold,
                          unit: anyTokens ? "tokens/s" : "samples/s", since,
                          series: trainSeries(tele.nodes, rate, "")});
    GL.lineChart(charts, {id: "mfu", title: "MFU", unit: "%", yMax: 100, since,
                          empty: "not reported (StepTimer(flops_per_token=…) gives it)",
                          series: trainSeries(tele.nodes, (t) => (t.mfu === null ||
                            t.mfu === undefined ? null : 100 * t.mfu), "")});
    GL.lineChart(charts, {id: "data-wait", title: "Waiting for data", unit: "% of step time",
                          yMax: 100, since, empty: untold,
                          series: trainSeries(tele.nodes, (t) => (t.data_wait_ratio === null ||
                            t.data_wait_ratio === undefined ? null : 100 * t.data_wait_ratio),
                                              "")});
    GL.lineChart(charts, {id: "gpu-util", title: "GPU utilisation", unit: "%", yMax: 100, since,
                          series: gpuSeries(tele.nodes, (g) => g.utilization_pct)});
    const steps = checkpoints(tele.nodes);
    return [
      el("h1", {}, "Job #" + j.id + " " + (j.name || "") + " ", status(j.status)),
      el("div", {class: "facts"},
        fact("attempt", j.attempt), fact("cluster", j.cluster
          ? el("a", {href: "/ui/cluster?name=" + encodeURIComponent(j.cluster)}, j.cluster) : "–"),
        fact("where", j.where || "–"), fact("pricing", j.pricing || "–"),
        fact("$/h", money(price)), fact("spent", usd(j.cost && j.cost.spent_usd)),
        fact("recoveries", j.recoveries), fact("restarts", j.restarts),
        fact("checkpoints", j.checkpoint_store || "–")),
      el("h2", {}, "Training over the last hour"),
      charts,
      el("h2", {}, "Attempts"),
      table(["#", "cluster", "status", "pricing", "where", "failure"],
        j.attempts.map((a, i) => el("tr", {}, num(i + 1),
          td(el("a", {href: "/ui/cluster?name=" + encodeURIComponent(a.name)}, a.name)),
          td(status(a.status)), td(a.pricing || "–"), td(a.where || "–"),
          td(a.failure || ""))), "attempts"),
      el("h2", {}, "Checkpoints"),
      table(["step ", "attempt cluster", "saved"], steps.map(([step, [cluster, at]]) =>
        el("tr", {}, num(step), td(cluster || "–"), td(when(at)))), "checkpoints"),
      el("h2", {}, "Events"),
      table(["at", "event", "detail"], [
        ...(j.events || []).map((e) => [e.at, e.kind, e.detail]),
        ...(j.history || []).map((h) => [h.at, (h.from || "–") + " → " + h.to, h.reason]),
      ].sort((a, b) => b[0] - a[0]).map(([at, what, detail]) =>
        el("tr", {}, td(when(at)), td(what), td(detail || ""))), "events"),
    ];
  }

  const PAGES = {overview, cluster: clusterPage, job: jobPage};

  async function draw() {
    const render = PAGES[page] || GL.pages[page];
    if (!render) return;
    try {
      const parts = await render();
      app.replaceChildren(...parts);
      document.body.dataset.loaded = String(Date.now());
      document.getElementById("updated").textContent =
        "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      app.replaceChildren(el("p", {class: "message", id: "error"}, e.message));
      document.body.dataset.failed = e.message;
    }
  }

  // serving.js (loaded after this file) adds its pages to GL.pages before the DOM is ready
  document.addEventListener("DOMContentLoaded", () => {
    if (PAGES[page] || GL.pages[page]) {
      draw();
      setInterval(draw, REFRESH_MS);
    }
  });
})(window.GL);
