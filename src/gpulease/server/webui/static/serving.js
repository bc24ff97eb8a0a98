// The dashboard's serving parts: the overview's "Services" and "Pools" sections
// (GL.servingSections) and a service's page (GL.pages.service: its replicas, scaling decisions,
// events and load charts). Reads GET /v1/services[/{name}[/load]] and /v1/pools with the session
// cookie; uses app.js's helpers (GL.ui). The load charts plot the server's load history (a point
// every telemetry interval for the last hour, since the server started); the desired replicas,
// its scaling decisions.
"use strict";
window.GL = window.GL || {};
(function (GL) {
  const {el, api, table, num, td, money, usd, when, status, fact, HOUR_S, params} = GL.ui;
  const ms = (v) => (v === null || v === undefined ? "–" : Number(v).toFixed(1) + " ms");
  const rate = (v) => (v === null || v === undefined ? "–" : Number(v).toFixed(2) + " req/s");
  const perK = (v) => (v === null || v === undefined ? "–" : "$" + Number(v).toFixed(4));
  const ready = (s) => (s.replicas || []).filter((r) => r.state === "ready").length;
  const serviceLink = (name) => el("a", {href: "/ui/service?name=" + encodeURIComponent(name)},
                                   name);

  async function optional(path, key) {
    try { return (await api(path))[key]; } catch (e) {
      if (e.status === 404) return [];  // a server without that route (not a failure)
      throw e;
    }
  }

  function count(nodes, state) {
    return nodes.filter((n) => n.state === state).length;
  }

  GL.servingSections = async function () {
    const [services, pools] = await Promise.all([optional("/v1/services", "services"),
                                                 optional("/v1/pools", "pools")]);
    return [
      el("h2", {}, "Services"),
      table(["name", "status", "endpoint", "ready/desired ", "QPS ", "p50 ", "p95 ", "load ",
             "$/h ", "$ per 1k req "],
        services.map((s) => el("tr", {"data-service": s.name},
          td(serviceLink(s.name)), td(status(s.status)), td(s.endpoint || "–"),
          num(ready(s) + " / " + s.desired_replicas), num(rate(s.load.qps)),
          num(ms(s.load.latency_p50_ms)), num(ms(s.load.latency_p95_ms)),
          num(s.load.load === null ? "–" : Number(s.load.load).toFixed(2)),
          num(money(s.cost.per_hour_usd)), num(perK(s.cost.per_1k_requests_usd)))), "services"),
      el("h2", {}, "Pools"),
      table(["name", "status", "nodes idle ", "busy ", "starting ", "desired ", "min–max ",
             "jobs waiting ", "$/h "],
        pools.map((p) => el("tr", {"data-pool": p.name},
          td(p.name), td(status(p.status)), num(count(p.nodes, "idle")),
          num(count(p.nodes, "busy")), num(count(p.nodes, "provisioning")),
          num(p.desired_nodes), num(p.min_nodes + "–" + p.max_nodes),
          num((p.waiting_jobs || []).length), num(money(p.price_per_hour)))), "pools"),
    ];
  };

  // ---- the load charts -----------------------------------------------------------------------

  // the desired count as a step line over the last hour: its value an hour ago (the last older
  // decision's), each later decision's from → to, and now
  function wanted(decisions, since, now, desired) {
    const older = decisions.filter((d) => d.at < since);
    const points = older.length ? [[since, older[older.length - 1].to]] : [];
    for (const d of decisions.filter((d) => d.at >= since)) {
      points.push([d.at, d.from], [d.at, d.to]);
    }
    points.push([now, desired]);
    return points;
  }

  function loadCharts(view, seen, since) {
    const column = (key) => seen.points.map((p) => [p.at, p[key]]);
    const charts = el("div", {class: "charts"});
    GL.lineChart(charts, {id: "qps", title: "Requests", unit: "req/s", since,
                          series: [{name: "QPS", points: column("qps")}]});
    GL.lineChart(charts, {id: "latency", title: "Latency", unit: "ms", since,
                          empty: "no requests yet",
                          series: [{name: "p50", points: column("latency_p50_ms")},
                                   {name: "p95", points: column("latency_p95_ms")}]});
    GL.lineChart(charts, {id: "replicas", title: "Replicas", since,
                          series: [{name: "desired (the decisions)",
                                    points: wanted(view.decisions || [], since,
                                                   Date.now() / 1000, view.desired_replicas)},
                                   {name: "behind the endpoint", points: column("replicas")}]});
    return charts;
  }

  // ---- a service's page ---------------------------------------------------------------------

  function replicaRows(view) {
    const perReplica = new Map((view.load.per_replica || []).map((r) => [r.id, r]));
    return view.replicas.map((r) => {
      const load = perReplica.get(r.id) || {};
      return el("tr", {"data-replica": r.index},
        num(r.index), td(el("a", {href: "/ui/cluster?name=" + encodeURIComponent(r.cluster)},
                            r.cluster)),
        td(status(r.state)), num(r.version), td(r.where || "–"), td(r.instance_type || "–"),
        td(r.spot ? "spot" : "on-demand"), num(money(r.price_per_hour)),
        num(load.in_flight === undefined ? "–" : load.in_flight), num(rate(load.qps)),
        num(ms(load.latency_p95_ms)));
    });
  }

  GL.pages.service = async function () {
    const name = params.get("name") || "";
    const path = "/v1/services/" + encodeURIComponent(name);
    const since = Date.now() / 1000 - HOUR_S;
    const [v, seen] = await Promise.all([api(path), api(path + "/load?since=" + since)]);
    const load = v.load, cost = v.cost;
    const decisions = (v.decisions || []).slice().reverse();
    const history = (v.history || []).slice().reverse();
    return [
      el("h1", {}, "Service " + v.name + " ", status(v.status)),
      el("div", {class: "facts"},
        fact("endpoint", v.endpoint || "–"), fact("version", v.version),
        fact("replicas", ready(v) + " ready of " + v.desired_replicas + " desired (" +
             v.min_replicas + "–" + v.max_replicas + ")"),
        fact("autoscale", v.autoscale ? "on" : "off"), fact("QPS", rate(load.qps)),
        fact("latency", "p50 " + ms(load.latency_p50_ms) + ", p95 " + ms(load.latency_p95_ms)),
        fact("in flight", load.in_flight), fact("queued", load.queued),
        fact("load", load.load === null ? "–" : Number(load.load).toFixed(2)),
        fact("requests", load.requests + " (" + load.failed + " failed)"),
        fact("$/h", money(cost.per_hour_usd)), fact("spent", usd(cost.spent_usd)),
        fact("per 1k requests", perK(cost.per_1k_requests_usd)), fact("reason", v.reason || "–"),
        v.last_error ? fact("last error", v.last_error) : null),
      el("h2", {}, "Load over the last hour"),
      loadCharts(v, seen, since),
      el("h2", {}, "Replicas"),
      table(["# ", "cluster", "state", "version ", "where", "instance type", "pricing", "$/h ",
             "in flight ", "QPS ", "p95 "], replicaRows(v), "replicas"),
      el("h2", {}, "Scaling decisions"),
      table(["at", "replicas", "reason"], decisions.map((d) => el("tr", {},
        td(when(d.at)), td(d.from + " → " + d.to), td(d.reason || ""))), "decisions"),
      el("h2", {}, "Events"),
      table(["at", "from", "to", "reason"], history.map((h) => el("tr", {},
        td(when(h.at)), td(h.from || "–"), td(status(h.to)), td(h.reason || ""))), "events"),
    ];
  };
})(window.GL);
