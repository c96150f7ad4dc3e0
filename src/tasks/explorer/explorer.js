// SPDX-License-Identifier: Apache-2.0
// The attention explorer (multihead inspect --html): reads the page's embedded
// data (#mh-data, written by tasks/attention_explorer.cpp) and draws
//   - a model view: every layer x head as a small heatmap; click one to open it;
//   - a head view: its heatmap, the tokens on both sides, and per-head numbers;
//     hover a query to see what it attends to, a key to see what attends to it.
// Weights are stored per row as the top k keys, each as a byte of the row's
// maximum (so a weight reads back to within 1/255 of its row's largest).
"use strict";

(function () {
  const data = JSON.parse(document.getElementById("mh-data").textContent);
  const app = document.getElementById("mh-app");

  function bytes(b64) {
    const s = atob(b64), out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }

  // One attention kind (self-attention, cross-attention...): rows are queries, columns keys.
  class View {
    constructor(v) {
      Object.assign(this, v);
      this.T = v.queries.length;
      this.S = v.keys.length;
      this.index = new Uint16Array(bytes(v.index).buffer);  // (layers, heads, T, k) key positions
      this.value = bytes(v.value);                            // (layers, heads, T, k) weight / row max * 255
      this.rowMax = new Float32Array(bytes(v.row_max).buffer);  // (layers, heads, T)
      this.headMax = new Float32Array(v.layers * v.heads);
      for (let m = 0; m < v.layers * v.heads; m++)
        for (let q = 0; q < this.T; q++) this.headMax[m] = Math.max(this.headMax[m], this.rowMax[m * this.T + q]);
    }
    row(l, h) { return (l * this.heads + h) * this.T; }
    // Query q's weights over every key (zero where not kept).
    weights(l, h, q) {
      const out = new Float32Array(this.S), r = this.row(l, h) + q, mx = this.rowMax[r];
      for (let e = r * this.k; e < (r + 1) * this.k; e++) out[this.index[e]] = (this.value[e] / 255) * mx;
      return out;
    }
    masked(q, key) { return this.causal && key > q; }
    // The colour scale's maximum for a weight of (l, h, q).
    scaleMax(l, h, q) {
      if (state.scale === "absolute") return 1;
      if (state.scale === "head") return this.headMax[l * this.heads + h] || 1;
      return this.rowMax[this.row(l, h) + q] || 1;
    }
  }

  const views = data.views.map((v) => new View(v));
  const state = { view: 0, scale: "row", layer: -1, head: -1 };

  // White to dark blue for 0..1; masked cells light grey.
  function colour(t) {
    t = Math.max(0, Math.min(1, t));
    return [Math.round(255 * (1 - 0.95 * t)), Math.round(255 * (1 - 0.75 * t)), Math.round(255 * (1 - 0.35 * t))];
  }
  const MASKED = [225, 225, 225];
  const css = (rgb) => `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c);
    return e;
  }

  // A heatmap of (l, h) into a canvas of at most `size` pixels a side: each
  // pixel shows the largest scaled weight of the cells it covers.
  function drawMap(canvas, v, l, h, size) {
    const W = Math.min(v.S, size), H = Math.min(v.T, size);
    canvas.width = W;
    canvas.height = H;
    const peak = new Float32Array(W * H), masked = new Uint8Array(W * H).fill(1);
    for (let q = 0; q < v.T; q++) {
      const y = Math.floor((q * H) / v.T), r = v.row(l, h) + q, mx = v.rowMax[r], s = v.scaleMax(l, h, q);
      for (let x = 0; x < W; x++) {
        const firstKey = Math.floor((x * v.S) / W);
        if (!v.masked(q, firstKey)) masked[y * W + x] = 0;
      }
      for (let e = r * v.k; e < (r + 1) * v.k; e++) {
        const x = Math.floor((v.index[e] * W) / v.S), w = ((v.value[e] / 255) * mx) / s;
        if (w > peak[y * W + x]) peak[y * W + x] = w;
      }
    }
    const ctx = canvas.getContext("2d"), img = ctx.createImageData(W, H);
    for (let p = 0; p < W * H; p++) {
      const rgb = masked[p] ? MASKED : colour(peak[p]);
      img.data.set([rgb[0], rgb[1], rgb[2], 255], p * 4);
    }
    ctx.putImageData(img, 0, 0);
  }

  function legend() {
    const c = el("canvas", { width: 120, height: 12 });
    const ctx = c.getContext("2d");
    for (let x = 0; x < 120; x++) {
      ctx.fillStyle = css(colour(x / 119));
      ctx.fillRect(x, 0, 1, 12);
    }
    const v = views[state.view];
    let top = "1";
    if (state.scale === "row") top = "each row's maximum";
    else if (state.scale === "head")
      top = state.layer >= 0 ? `this head's maximum, ${fmt(v.headMax[state.layer * v.heads + state.head])}` : "each head's maximum";
    return el("span", { class: "mh-legend", id: "mh-legend" }, "0", c, top, v.causal ? " · grey: masked (causal)" : "");
  }

  const fmt = (w) => (w >= 0.001 || w === 0 ? w.toFixed(3) : w.toExponential(1));

  function controls() {
    const tabs = el("span", { class: "mh-tabs" });
    views.forEach((v, i) =>
      tabs.append(el("button", { class: i === state.view ? "mh-on" : "", "data-view": i,
                                 onclick: () => { state.view = i; state.layer = state.head = -1; render(); } }, v.name)));
    const scale = el("select", { id: "mh-scale", onchange: (e) => { state.scale = e.target.value; render(); } });
    for (const [value, text] of [["row", "per row maximum"], ["head", "per head maximum"], ["absolute", "absolute 0..1"]])
      scale.append(el("option", value === state.scale ? { value, selected: "" } : { value }, text));
    return el("div", { class: "mh-controls" }, views.length > 1 ? tabs : "", el("label", {}, "colour scale", scale), legend());
  }

  function modelView(v) {
    const grid = el("div", { class: "mh-grid", id: "mh-grid", style: `grid-template-columns: 60px repeat(${v.heads}, 110px)` });
    grid.append(el("span"));
    for (let h = 0; h < v.heads; h++) grid.append(el("span", { class: "mh-gridhead" }, `head ${h}`));
    for (let l = 0; l < v.layers; l++) {
      grid.append(el("span", { class: "mh-gridhead" }, `layer ${v.first_layer + l}`));
      for (let h = 0; h < v.heads; h++) {
        const canvas = el("canvas");
        drawMap(canvas, v, l, h, 96);
        const m = l * v.heads + h;
        grid.append(el("div", { class: "mh-cell" + (l === state.layer && h === state.head ? " mh-on" : ""),
                                "data-layer": v.first_layer + l, "data-head": h,
                                title: `layer ${v.first_layer + l}, head ${h}`,
                                onclick: () => { state.layer = l; state.head = h; render(); } },
                            canvas, `H/Hmax ${v.stats.entropy_ratio[m].toFixed(2)}` +
                              (v.stats.ablation ? ` · Δp ${(-100 * v.stats.ablation[m]).toFixed(1)}` : "")));
      }
    }
    // What the numbers under each head mean, on the page itself.
    const note = el("p", { class: "mh-note", id: "mh-captions" },
      el("b", {}, "H/Hmax"), ": the head's attention entropy over the uniform attention's (1: spread evenly over the " +
      "keys; near 0: on one key), averaged over queries.",
      v.stats.ablation ? el("span", {}, " ", el("b", {}, "Δp"), ": how many points the predicted class's " +
        "probability moves when this head alone is masked (negative: the prediction leans on the head).") : "");
    return el("div", {}, grid, note);
  }

  // The head view of (state.layer, state.head).
  function headView(v) {
    const l = state.layer, h = state.head, m = l * v.heads + h, st = v.stats;
    const box = el("section", { class: "mh-head", id: "mh-head", "data-layer": v.first_layer + l, "data-head": h });
    box.append(el("h2", {}, `${v.name}: layer ${v.first_layer + l}, head ${h}`));
    box.append(el("div", { class: "mh-stats" },
      el("span", {}, el("b", {}, "entropy "), `${st.entropy[m].toFixed(3)} nats (${(100 * st.entropy_ratio[m]).toFixed(0)}% of uniform)`),
      el("span", {}, el("b", {}, "mass on the top key "), `${(100 * st.top1[m]).toFixed(1)}%`),
      el("span", {}, el("b", {}, `on the top ${st.top_n} `), `${(100 * st.topn[m]).toFixed(1)}%`),
      el("span", {}, el("b", {}, "distance to the nearest head "), st.nearest ? `${st.nearest[m].toFixed(3)} (head ${st.nearest_head[m]})` : "-"),
      st.ablation ? el("span", { id: "mh-ablation" }, el("b", {}, "masked, the prediction's probability "),
                       `${st.ablation[m] > 0 ? "falls" : "rises"} ${Math.abs(100 * st.ablation[m]).toFixed(2)} points`) : ""));
    const map = el("canvas", { class: "mh-map" });
    const cell = Math.max(1, Math.min(24, Math.floor(560 / Math.max(v.T, v.S))));
    drawMap(map, v, l, h, 4096);
    map.style.width = `${v.S * cell}px`;
    map.style.height = `${v.T * cell}px`;
    const qs = el("div", { class: "mh-col", id: "mh-queries" }, el("h3", {}, "queries (hover: what it attends to)"));
    const ks = el("div", { class: "mh-col", id: "mh-keys" }, el("h3", {}, "keys (hover: what attends to it)"));
    // Spaces (a character model's tokens) show as ␣.
    const tok = (cls, i, text) => el("div", { class: "mh-tok " + cls, "data-i": i },
                                      el("span", {}, text.replace(/ /g, "\u2423")), el("span", { class: "mh-w" }));
    v.queries.forEach((t, i) => qs.append(tok("mh-q", i, t)));
    v.keys.forEach((t, j) => ks.append(tok("mh-k", j, t)));
    const clear = () => {
      for (const e of box.querySelectorAll(".mh-tok")) {
        e.style.background = e.style.color = "";
        e.classList.remove("mh-src", "mh-masked");
        e.removeAttribute("data-weight");
        e.querySelector(".mh-w").textContent = "";
      }
    };
    const paint = (e, w, s, masked) => {
      if (masked) { e.classList.add("mh-masked"); return; }
      e.dataset.weight = w;
      e.style.background = css(colour(w / s));
      e.style.color = w / s > 0.6 ? "#fff" : "";
      e.querySelector(".mh-w").textContent = fmt(w);
    };
    qs.addEventListener("mouseover", (ev) => {
      const e = ev.target.closest(".mh-q");
      if (!e) return;
      clear();
      const q = +e.dataset.i, w = v.weights(l, h, q), s = v.scaleMax(l, h, q);
      e.classList.add("mh-src");
      ks.querySelectorAll(".mh-k").forEach((k, j) => paint(k, w[j], s, v.masked(q, j)));
    });
    ks.addEventListener("mouseover", (ev) => {
      const e = ev.target.closest(".mh-k");
      if (!e) return;
      clear();
      const j = +e.dataset.i;
      e.classList.add("mh-src");
      qs.querySelectorAll(".mh-q").forEach((qe, q) => paint(qe, v.weights(l, h, q)[j], v.scaleMax(l, h, q), v.masked(q, j)));
    });
    box.append(el("div", { class: "mh-body" }, map, el("div", { class: "mh-tokens" }, qs, ks)));
    if (v.k < v.S)
      box.append(el("div", { class: "mh-note" },
        `Each query keeps its ${v.k} largest weights of ${v.S} (the rest, ${(100 * st.dropped_mass[m]).toFixed(2)}% of its mass on average, show as 0).`));
    return box;
  }

  function render() {
    const v = views[state.view];
    app.replaceChildren(
      el("h1", {}, data.title),
      el("div", { class: "mh-sub" }, data.subtitle),
      controls(),
      modelView(v));
    if (state.layer >= 0) app.append(headView(v));
  }

  render();
  document.body.dataset.ready = "1";  // for tests: the first view is drawn
})();
