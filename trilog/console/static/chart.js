// trilog console: line charts drawn as SVG, no library. Each <figure data-chart="URL">
// is filled from URL's JSON ({unit, series: [{name, points: [[ms, value], ...]}]}) and
// redrawn every few seconds from the console's samples.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2",
                  "#db2777", "#4b5563"];
  const W = 720, H = 220, PAD = {left: 64, right: 12, top: 10, bottom: 26};
  const REFRESH_MS = 5000;

  function el(name, attrs, text) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function niceMax(value) {
    if (!(value > 0)) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 2.5, 5, 10]) {
      if (step * power >= value) return step * power;
    }
    return 10 * power;
  }

  function label(value) {
    if (Math.abs(value) >= 1e6) return (value / 1e6).toFixed(1) + "M";
    if (Math.abs(value) >= 1e3) return (value / 1e3).toFixed(1) + "k";
    return Number.isInteger(value) ? String(value) : value.toFixed(1);
  }

  function clock(ms) {
    const d = new Date(ms);
    return d.toTimeString().slice(0, 8);
  }

  function draw(figure, data) {
    const plot = figure.querySelector(".plot");
    const series = (data.series || []).filter((s) => s.points.length > 0);
    if (series.length === 0) {
      plot.textContent = "waiting for samples…";
      return;
    }
    let t0 = Infinity, t1 = -Infinity, top = 0;
    for (const s of series) {
      for (const [t, v] of s.points) {
        t0 = Math.min(t0, t); t1 = Math.max(t1, t); top = Math.max(top, v);
      }
    }
    if (t1 === t0) t1 = t0 + 1000;
    top = niceMax(top);
    const x = (t) => PAD.left + (t - t0) / (t1 - t0) * (W - PAD.left - PAD.right);
    const y = (v) => H - PAD.bottom - v / top * (H - PAD.top - PAD.bottom);
    const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, role: "img",
                           "aria-label": figure.querySelector("figcaption").textContent});
    for (let i = 0; i <= 4; i++) {
      const v = top * i / 4;
      svg.appendChild(el("line", {x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v),
                                  class: "grid"}));
      svg.appendChild(el("text", {x: PAD.left - 6, y: y(v) + 4, "text-anchor": "end",
                                  class: "axis"}, label(v)));
    }
    for (let i = 0; i <= 3; i++) {
      const t = t0 + (t1 - t0) * i / 3;
      const anchor = i === 0 ? "start" : i === 3 ? "end" : "middle";
      svg.appendChild(el("text", {x: x(t), y: H - 6, "text-anchor": anchor,
                                  class: "axis"}, clock(t)));
    }
    series.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      const points = s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`);
      if (points.length === 1) {
        svg.appendChild(el("circle", {cx: x(s.points[0][0]), cy: y(s.points[0][1]), r: 3,
                                      fill: color}));
      }
      svg.appendChild(el("polyline", {points: points.join(" "), fill: "none",
                                      stroke: color, "stroke-width": 2,
                                      "data-series": s.name}));
    });
    const legend = document.createElement("div");
    legend.className = "legend";
    const unit = document.createElement("b");
    unit.textContent = data.unit || "";
    legend.appendChild(unit);
    series.forEach((s, i) => {
      const item = document.createElement("span");
      item.style.setProperty("--swatch", COLORS[i % COLORS.length]);
      const last = s.points[s.points.length - 1][1];
      item.textContent = `${s.name}: ${label(last)}`;
      legend.appendChild(item);
    });
    plot.replaceChildren(svg, legend);
  }

  async function refresh(figure) {
    try {
      const response = await fetch(figure.dataset.chart, {credentials: "same-origin"});
      if (!response.ok) throw new Error(`${response.status}`);
      draw(figure, await response.json());
      figure.classList.remove("stale");
    } catch (err) {
      figure.classList.add("stale");
    }
  }

  function start() {
    const figures = Array.from(document.querySelectorAll("figure[data-chart]"));
    const all = () => Promise.all(figures.map(refresh));
    all();
    if (figures.length) setInterval(all, REFRESH_MS);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
