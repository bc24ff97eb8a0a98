// A small line chart in plain SVG (no library): time on x, one polyline per series.
// GL.lineChart(parent, {title, unit, yMax, since, minSpan, series: [{name, points: [[t, v]]}]})
// (t in Unix seconds; the x axis runs from the first point, or minSpan seconds back, to now)
// appends <div class="chart" data-chart=... data-points=N data-series=M>; the data-* attributes
// say what was drawn, and each polyline's data-points / data-last its count and newest value
// (the dashboard's browser test reads them).
"use strict";
window.GL = window.GL || {};
(function (GL) {
  const NS = "http://www.w3.org/2000/svg";
  const W = 560, H = 220, L = 44, R = 12, T = 10, B = 26;
  const COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2",
                   "#ca8a04", "#db2777"];

  function svg(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function niceMax(value) {
    if (!(value > 0)) return 1;
    const step = Math.pow(10, Math.floor(Math.log10(value)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * step >= value) return m * step;
    return 10 * step;
  }

  function clock(t) {
    const d = new Date(t * 1000);
    return String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0");
  }

  function fmt(v) {
    if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (Math.abs(v) >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return Number.isInteger(v) ? String(v) : v.toFixed(1);
  }

  GL.lineChart = function (parent, opts) {
    const series = (opts.series || []).map((s) => ({
      name: s.name,
      points: (s.points || []).filter((p) => p[1] !== null && p[1] !== undefined
                                             && Number.isFinite(p[1])),
    }));
    const all = series.flatMap((s) => s.points);
    const box = document.createElement("div");
    box.className = "chart";
    box.dataset.chart = opts.id || opts.title;
    box.dataset.points = String(all.length);
    box.dataset.series = String(series.filter((s) => s.points.length).length);
    const h3 = document.createElement("h3");
    h3.textContent = opts.title + (opts.unit ? " (" + opts.unit + ")" : "");
    box.appendChild(h3);
    const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img",
                             "aria-label": opts.title});
    box.appendChild(root);
    parent.appendChild(box);
    if (!all.length) {
      root.appendChild(svg("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty"},
                           opts.empty || "no data yet"));
      return box;
    }
    const now = Date.now() / 1000;
    // from the first point (but at least the last minSpan seconds, and never before `since`)
    const x1 = Math.max(now, ...all.map((p) => p[0]));
    const first = Math.min(...all.map((p) => p[0]), x1 - (opts.minSpan || 600));
    const x0 = Math.max(first, opts.since || -Infinity);
    const yMax = opts.yMax || niceMax(Math.max(...all.map((p) => p[1])));
    const px = (t) => L + ((t - x0) / Math.max(x1 - x0, 1)) * (W - L - R);
    const py = (v) => T + (1 - Math.min(v, yMax) / yMax) * (H - T - B);
    for (let i = 0; i <= 4; i++) {
      const v = (yMax * i) / 4, y = py(v);
      root.appendChild(svg("line", {x1: L, x2: W - R, y1: y, y2: y, class: "grid"}));
      root.appendChild(svg("text", {x: L - 4, y: y + 4, "text-anchor": "end"}, fmt(v)));
    }
    for (let i = 0; i <= 4; i++) {
      const t = x0 + ((x1 - x0) * i) / 4;
      const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
      root.appendChild(svg("text", {x: px(t), y: H - 8, "text-anchor": anchor}, clock(t)));
    }
    root.appendChild(svg("line", {x1: L, x2: L, y1: T, y2: H - B, class: "axis"}));
    root.appendChild(svg("line", {x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis"}));
    const legend = document.createElement("div");
    legend.className = "legend";
    series.forEach((s, i) => {
      const colour = COLOURS[i % COLOURS.length];
      if (!s.points.length) return;
      const pts = s.points.map((p) => px(p[0]).toFixed(1) + "," + py(p[1]).toFixed(1));
      const line = svg("polyline", {points: pts.join(" "), class: "line", stroke: colour,
                                    "data-points": s.points.length,
                                    "data-last": s.points[s.points.length - 1][1]});
      line.appendChild(svg("title", {}, s.name));
      root.appendChild(line);
      if (s.points.length === 1) {
        const [cx, cy] = pts[0].split(",");
        root.appendChild(svg("circle", {cx, cy, r: 2.5, fill: colour}));
      }
      const item = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.style.background = colour;
      item.append(swatch, s.name);
      legend.appendChild(item);
    });
    box.appendChild(legend);
    return box;
  };
})(window.GL);
