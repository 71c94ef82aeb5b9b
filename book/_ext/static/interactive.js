// Figures a reader can move (book/_ext/claimsbook/verdicts.py puts a <div class="interactive-figure"
// data-figure="C5"> after the verdict box of each claim in its INTERACTIVE list). Plain JavaScript and
// SVG, no library, no network: each figure computes its curve in the page from the formula its
// chapter derives — except a figure of measurements (D1), whose notebook stores its numbers in its
// own output beside the static figure (attnref/book/interactive.py: the same hidden div holding a
// <script type="application/json">). The static figure stays for the PDF and for readers without
// JavaScript (the div is hidden until this script fills it; the print style hides it).
// tests/test_browser_claims.py moves each control in Chromium and compares the shown value
// (data-value; D1 also data-values) with Python's, or with the notebook's stored numbers.
(function () {
  "use strict";
  // The plot is drawn in CSS pixels at the width the page shows it (the viewBox is the SVG's displayed
  // width, redrawn when that changes), so its text keeps its real size while the plot shrinks on a
  // phone: never below MIN_PX (9 CSS points, attnref.book.plotting.MIN_DISPLAYED_PT, with a margin), and
  // on a laptop as large as the 460-unit design scaled to the page (12 and 13 units). Ticks, labels
  // and the legend are laid out from their measured widths: an axis label wraps to its axis, a middle
  // tick that would touch its neighbours is left out, and a legend too wide for a corner of the plot
  // goes below it, wrapping. tests/test_browser_claims.py measures every text at 360, 390 and 1400 px.
  var BASE_W = 460, BASE_PLOT_H = 198, MIN_PX = 12.5, NARROW = 420, LINE = 1.25;
  var COLOURS = ["#0072B2", "#D55E00", "#009E73"];

  function logspace(a, b, k) {
    var out = [];
    for (var i = 0; i < k; i++) { out.push(Math.pow(10, Math.log10(a) + (Math.log10(b) - Math.log10(a)) * i / (k - 1))); }
    return out;
  }
  function linspace(a, b, k) {
    var out = [];
    for (var i = 0; i < k; i++) { out.push(a + (b - a) * i / (k - 1)); }
    return out;
  }
  // A number for the reader: four significant digits, a whole number below 10^5 exactly (a slider's
  // 65536 read "65540"). A count (fmtCount) is exact, with thousands separators: H4's "costs 49,152
  // more" had read "49150".
  function fmtCount(x) { return Number.isInteger(x) ? x.toLocaleString("en-US") : fmt(x); }
  function fmt(x) {
    if (x === 0) { return "0"; }
    var a = Math.abs(x);
    if (Number.isInteger(x) && a < 1e5) { return String(x); }
    if (a >= 1e5 || a < 1e-3) { return x.toExponential(3).replace("e+", "e"); }
    return String(Number(x.toPrecision(4)));
  }
  function svgEl(name, attrs) {
    var el = document.createElementNS("http://www.w3.org/2000/svg", name);
    Object.keys(attrs || {}).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    return el;
  }
  // The widths of texts at a font size, measured in the SVG (an estimate when it is not rendered).
  function measurer(svg) {
    var probe = svgEl("text", {x: 0, y: -1000, visibility: "hidden"});
    svg.appendChild(probe);
    var width = function (text, size) {
      probe.setAttribute("font-size", size);
      probe.textContent = text;
      var w = text ? probe.getComputedTextLength() : 0;
      return w > 0 || !text ? w : 0.6 * size * text.length;
    };
    width.done = function () { svg.removeChild(probe); };
    return width;
  }
  // Greedy line breaking of a text at spaces into lines no wider than room (a longer word keeps its line).
  function wrap(text, size, room, width) {
    var lines = [];
    String(text).split(" ").forEach(function (word) {
      var last = lines.length - 1;
      if (last >= 0 && width(lines[last] + " " + word, size) <= room) { lines[last] += " " + word; } else { lines.push(word); }
    });
    return lines;
  }
  // Text lines, one svg <text> each; rotated -90° about (x, y) when vertical.
  function lines(svg, texts, x, y, attrs, dx, dy, vertical) {
    texts.forEach(function (line, i) {
      var a = {x: x + i * dx, y: y + i * dy};
      Object.keys(attrs).forEach(function (k) { a[k] = attrs[k]; });
      if (vertical) { a.transform = "rotate(-90 " + a.x + " " + a.y + ")"; }
      var t = svgEl("text", a);
      t.textContent = line;
      svg.appendChild(t);
    });
  }
  // A line plot: series [{name, xs, ys, color}], a marker {x, y}; log axes where asked.
  function plot(svg, spec) {
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var W = svg.getBoundingClientRect().width || BASE_W, k = W / BASE_W;
    var tick = Math.max(MIN_PX, 12 * k), big = Math.max(MIN_PX + 0.5, 13 * k), gap = Math.max(4, 4 * k);
    var width = measurer(svg), narrow = W < NARROW;
    var xs = [], ys = [];
    spec.series.forEach(function (s) { xs = xs.concat(s.xs); ys = ys.concat(s.ys); });
    var tx = spec.logx ? Math.log10 : function (v) { return v; };
    var ty = spec.logy ? Math.log10 : function (v) { return v; };
    xs = xs.filter(function (x, i) { return ys[i] !== null; });
    ys = ys.filter(function (y) { return y !== null; });
    var x0 = spec.xmin !== undefined ? tx(spec.xmin) : Math.min.apply(null, xs.map(tx));
    var x1 = spec.xmax !== undefined ? tx(spec.xmax) : Math.max.apply(null, xs.map(tx));
    if (x1 - x0 < 1e-12) { x1 = x0 + 1; }
    var y0 = spec.ymin !== undefined ? ty(spec.ymin) : Math.min.apply(null, ys.map(ty));
    var y1 = spec.ymax !== undefined ? ty(spec.ymax) : Math.max.apply(null, ys.map(ty));
    if (y1 - y0 < 1e-12) { y1 = y0 + 1; }
    var at = function (f, lo, hi, log) { return log ? Math.pow(10, lo + f * (hi - lo)) : lo + f * (hi - lo); };
    var ticks = [0, 0.5, 1];                                   // three ticks per axis, fewer if they would touch
    var yText = ticks.map(function (f) { return fmt(at(f, y0, y1, spec.logy)); });
    var xText = ticks.map(function (f) { return fmt(at(f, x0, x1, spec.logx)); });
    // the layout, from the outside in: y label, y ticks | plot | right margin; x ticks, x label, legend
    var plotH = Math.max(150, BASE_PLOT_H * k);
    var yLabel = wrap(spec.ylabel, big, plotH, width);
    var yTickW = Math.max.apply(null, yText.map(function (t) { return width(t, tick); }));
    var pad = {t: Math.max(12 * k, 0.7 * tick + 2), r: Math.max(8, 14 * k)};
    pad.l = 2 + big * (1.3 + (yLabel.length - 1) * LINE) + gap + yTickW + gap;
    var plotW = W - pad.l - pad.r;
    var xLabel = wrap(spec.xlabel, big, plotW, width);
    var names = spec.legend === false ? [] : spec.series.map(function (s) { return s.name || ""; });
    var key = 2.2 * tick;                                      // a legend entry: a stroke of the curve, then its name
    var entryW = names.map(function (n) { return key + width(n, tick); });
    var inside = !narrow && names.length && Math.max.apply(null, entryW) <= 0.6 * plotW;
    var rows = [];                                             // below the plot: entries flow into rows
    if (names.length && !inside) {
      names.forEach(function (n, i) {
        var row = rows[rows.length - 1];
        if (row && row.w + 1.2 * tick + entryW[i] <= W - 2 * gap) { row.items.push(i); row.w += 1.2 * tick + entryW[i]; }
        else { rows.push({items: [i], w: entryW[i]}); }
      });
    }
    var xTickBase = pad.t + plotH + gap + tick;
    var xLabelBase = xTickBase + 0.3 * tick + big * LINE;
    var legendBase = xLabelBase + (xLabel.length - 1) * big * LINE + 0.3 * big + tick * LINE;
    var H = (rows.length ? legendBase + (rows.length - 1) * tick * LINE : xLabelBase + (xLabel.length - 1) * big * LINE) + 0.4 * big;
    svg.setAttribute("viewBox", "0 0 " + W.toFixed(2) + " " + H.toFixed(2));
    var px = function (v) { return pad.l + (tx(v) - x0) / (x1 - x0) * plotW; };
    var py = function (v) { return pad.t + plotH - (ty(v) - y0) / (y1 - y0) * plotH; };
    svg.appendChild(svgEl("rect", {x: pad.l, y: pad.t, width: plotW, height: plotH, fill: "none", stroke: "#999"}));
    var xw = xText.map(function (t) { return width(t, tick); });
    var keepMiddle = pad.l + xw[0] + 2 * gap <= pad.l + plotW / 2 - xw[1] / 2 &&
      pad.l + plotW / 2 + xw[1] / 2 + 2 * gap <= pad.l + plotW - xw[2];
    ticks.forEach(function (f, i) {
      if (i === 1 && !keepMiddle) { return; }
      var t = svgEl("text", {x: pad.l + f * plotW, y: xTickBase, "text-anchor": ["start", "middle", "end"][i], "font-size": tick});
      t.textContent = xText[i]; svg.appendChild(t);
      t = svgEl("text", {x: pad.l - gap, y: pad.t + (1 - f) * plotH + 0.35 * tick, "text-anchor": "end", "font-size": tick});
      t.textContent = yText[i]; svg.appendChild(t);
    });
    lines(svg, xLabel, pad.l + plotW / 2, xLabelBase, {"text-anchor": "middle", "font-size": big}, 0, big * LINE, false);
    var yMid = pad.t + plotH / 2;
    lines(svg, yLabel, 2 + big, yMid, {"text-anchor": "middle", "font-size": big}, big * LINE, 0, true);
    (spec.hlines || []).forEach(function (h) {   // a reference level, dotted, labelled at its left end
      svg.appendChild(svgEl("line", {x1: pad.l, x2: pad.l + plotW, y1: py(h.y), y2: py(h.y), stroke: "#666",
        "stroke-dasharray": "2 3"}));
      var said = wrap(h.label, tick, plotW - 2 * gap, width);
      lines(svg, said, pad.l + gap, py(h.y) - gap - (said.length - 1) * tick * LINE, {"font-size": tick, fill: "#666"},
        0, tick * LINE, false);
    });
    var colour = function (s, i) { return s.color || COLOURS[i % COLOURS.length]; };
    var entry = function (i, x, y) {   // a legend entry whose stroke starts at x, text baseline y
      var s = spec.series[i], line = {x1: x, x2: x + key - 0.5 * tick, y1: y - 0.35 * tick, y2: y - 0.35 * tick,
        stroke: colour(s, i), "stroke-width": 2.5, "class": "legend-key"};
      if (s.dash) { line["stroke-dasharray"] = s.dash; }
      svg.appendChild(svgEl("line", line));
      var t = svgEl("text", {x: x + key, y: y, "font-size": tick});
      t.textContent = names[i]; svg.appendChild(t);
    };
    spec.series.forEach(function (s, i) {
      var pen = "M", d = [];
      s.xs.forEach(function (x, j) {   // a null value (NaN in the notebook) breaks the line
        if (s.ys[j] === null) { pen = "M"; return; }
        d.push(pen + px(x).toFixed(1) + " " + py(s.ys[j]).toFixed(1)); pen = "L";
      });
      var attrs = {d: d.join(" "), fill: "none", stroke: colour(s, i), "stroke-width": 2, "class": "curve"};
      if (s.dash) { attrs["stroke-dasharray"] = s.dash; }
      svg.appendChild(svgEl("path", attrs));
      if (inside) {   // the upper right corner of the plot, one entry a line, their strokes aligned
        entry(i, pad.l + plotW - gap - Math.max.apply(null, entryW), pad.t + gap + tick + tick * LINE * i);
      }
    });
    rows.forEach(function (row, r) {   // below the x label, centred under the plot
      var x = Math.max(gap, Math.min(pad.l + plotW / 2 - row.w / 2, W - gap - row.w));
      row.items.forEach(function (i) { entry(i, x, legendBase + r * tick * LINE); x += entryW[i] + 1.2 * tick; });
    });
    (spec.marker ? [spec.marker] : spec.markers || []).forEach(function (m) {
      // the marker's outline is the text colour (claims.css): black on a light page, light on a dark one
      svg.appendChild(svgEl("circle", {cx: px(m.x), cy: py(m.y), r: 5, fill: m.color || "currentColor",
        stroke: "currentColor", "stroke-width": 1.5, "class": "marker"}));
    });
    width.done();
  }
  function softmax(z) {
    var m = Math.max.apply(null, z), e = z.map(function (v) { return Math.exp(v - m); });
    var s = e.reduce(function (a, b) { return a + b; }, 0);
    return e.map(function (v) { return v / s; });
  }

  // Each figure: its controls (name, label, min, max, step, value, log: slider over log10) and
  // draw(values) -> {spec, value, text}: the plot, the number shown (data-value) and its sentence.
  var FIGURES = {
    C5: {
      title: "C5 · the cap on cosine attention's largest weight",
      controls: [{name: "beta", label: "scale β", min: 0.5, max: 8, step: 0.5, value: 1},
                 {name: "n", label: "keys n", min: 1, max: 4096, step: 1, value: 64, log: true}],
      draw: function (v) {
        var cap = function (n) { return Math.exp(2 * v.beta) / (Math.exp(2 * v.beta) + n - 1); };
        var ns = logspace(2, 4096, 60);
        return {spec: {series: [{name: "cap e^(2β)/(e^(2β)+n−1)", xs: ns, ys: ns.map(cap)}], logx: true, ymin: 0, ymax: 1,
                       xlabel: "number of keys n", ylabel: "largest weight", marker: {x: Math.max(v.n, 2), y: cap(Math.max(v.n, 2))}},
                value: cap(v.n), text: "With cosine scores times β = " + fmt(v.beta) + " and n = " + v.n +
                  " keys, no weight exceeds " + fmt(cap(v.n)) + "."};
      }
    },
    C2: {
      title: "C2 · the query's norm acts as a temperature",
      controls: [{name: "r", label: "query norm ‖q‖", min: 0.1, max: 30, step: 0.1, value: 1, log: true}],
      cosines: [0.9, 0.6, 0.3, 0, -0.5],
      draw: function (v) {
        var cos = FIGURES.C2.cosines, top = function (r) { return softmax(cos.map(function (c) { return r * c; }))[0]; };
        var rs = logspace(0.1, 30, 60);
        return {spec: {series: [{name: "largest weight", xs: rs, ys: rs.map(top)}], logx: true, ymin: 0, ymax: 1,
                       xlabel: "query norm ‖q‖ (key cosines 0.9, 0.6, 0.3, 0, −0.5)", ylabel: "weight of the best key",
                       marker: {x: v.r, y: top(v.r)}},
                value: top(v.r), text: "Scores ‖q‖·cos: at ‖q‖ = " + fmt(v.r) + " the best key gets " + fmt(top(v.r)) +
                  " of the attention; the cosines are the same at every norm."};
      }
    },
    L4: {
      title: "L4 · random directions are nearly orthogonal: E[cos²] = 1/d",
      controls: [{name: "d", label: "dimension d", min: 2, max: 4096, step: 1, value: 64, log: true}],
      draw: function (v) {
        var ds = logspace(2, 4096, 60);
        return {spec: {series: [{name: "E[cos²] = 1/d", xs: ds, ys: ds.map(function (d) { return 1 / d; })}], logx: true, logy: true,
                       xlabel: "dimension d", ylabel: "mean squared cosine", marker: {x: v.d, y: 1 / v.d}},
                value: 1 / v.d, text: "In d = " + v.d + " dimensions two independent isotropic vectors have E[cos²] = " +
                  fmt(1 / v.d) + " (a typical |cos| near " + fmt(Math.sqrt(1 / v.d)) + ")."};
      }
    },
    C3: {
      title: "C3 · the variance of q·k grows like d_k; 1/√d_k brings it back to 1",
      controls: [{name: "dk", label: "head width d_k", min: 1, max: 1024, step: 1, value: 64, log: true}],
      draw: function (v) {
        var ds = logspace(1, 1024, 40);
        return {spec: {series: [{name: "Var[q·k] = d_k", xs: ds, ys: ds},
                                {name: "Var[q·k/√d_k] = 1", xs: ds, ys: ds.map(function () { return 1; })}],
                       logx: true, logy: true, xlabel: "head width d_k", ylabel: "variance of the score",
                       marker: {x: v.dk, y: v.dk}},
                value: v.dk, text: "Independent zero-mean unit-variance components: Var[q·k] = " + v.dk +
                  ", standard deviation " + fmt(Math.sqrt(v.dk)) + "; divided by √d_k the variance is 1."};
      }
    },
    H4: {
      title: "H4 · multiply–adds of one head's scores, three orders",
      controls: [{name: "n", label: "queries n", min: 1, max: 8192, step: 1, value: 1, log: true},
                 {name: "m", label: "keys m", min: 1, max: 65536, step: 1, value: 4096, log: true},
                 {name: "d", label: "width d", min: 16, max: 8192, step: 16, value: 256, log: true},
                 {name: "dk", label: "head width d_k", min: 1, max: 1024, step: 1, value: 32, log: true}],
      counts: function (n, m, d, dk) {   // attnref.counts.score_multiply_adds, the three orders
        return {factored: n * d * dk + m * d * dk + n * m * dk, absorbed: 2 * n * d * dk + n * m * d, fused: n * d * d + n * m * d};
      },
      draw: function (v) {
        var ms = logspace(1, 65536, 50), c = FIGURES.H4.counts;
        var now = c(v.n, v.m, v.d, v.dk);
        return {spec: {series: [
                  {name: "factored", xs: ms, ys: ms.map(function (m) { return c(v.n, m, v.d, v.dk).factored; })},
                  {name: "absorbed", xs: ms, ys: ms.map(function (m) { return c(v.n, m, v.d, v.dk).absorbed; })},
                  {name: "fused d×d", xs: ms, ys: ms.map(function (m) { return c(v.n, m, v.d, v.dk).fused; })}],
                  logx: true, logy: true, xlabel: "keys m", ylabel: "multiply–adds", marker: {x: v.m, y: now.fused}},
                value: now.fused - Math.min(now.factored, now.absorbed),
                text: "n = " + v.n + ", m = " + v.m + ", d = " + v.d + ", d_k = " + v.dk + ": factored " + fmtCount(now.factored) +
                  ", absorbed " + fmtCount(now.absorbed) + ", fused " + fmtCount(now.fused) + " — the fused matrix costs " +
                  fmtCount(now.fused - Math.min(now.factored, now.absorbed)) + " more than the cheaper order of the factors."};
      }
    },
    D1: {
      // Measurements, not a formula: the notebook's draws (notebooks/07-depth.ipynb stores, per
      // variant, the order statistics of log10 r_l over its random stacks at 0, 10, …, 100 %).
      title: "D1 · the residual r_l against depth in the three regimes",
      stored: true,
      controls: [{name: "l", label: "depth l", min: 0, max: 96, step: 1, value: 24},
                 {name: "q", label: "draw at percentile", min: 0, max: 100, step: 10, value: 50},
                 {name: "span", label: "layers shown", min: 4, max: 96, step: 1, value: 96},
                 {name: "none", label: "no skips", type: "checkbox", value: 1, regime: "no skips"},
                 {name: "plain", label: "plain skips", type: "checkbox", value: 1, regime: "plain skips"},
                 {name: "kept", label: "kept apart", type: "checkbox", value: 1, regime: "kept apart"}],
      headline: "attention + skip",
      bottom: -40,   // the lowest log10 r drawn; the exact recursions leave the plot there
      // A stored log10 r_l: null is a NaN of the notebook; a stack run directly resolves r only
      // above 10^resolved (below, the notebook stored its "unresolved" value); the exact
      // recursions follow r past float64's round-off and range.
      resolvedY: function (s, y, data) {
        return y !== null && (s.exact || y > data.resolved);
      },
      say: function (s, v, data) {
        if (v === null) { return "no value (NaN in the notebook)"; }
        if (!s.exact && v <= data.resolved) { return "r ≤ 1e" + data.resolved + " (unresolved)"; }
        return "r = " + (v >= -300 ? fmt(Math.pow(10, v)) : "10^(" + fmt(v) + ")");
      },
      draw: function (v, data) {
        var fig = FIGURES.D1, qi = data.percentiles.indexOf(v.q), L = Math.max(v.span, v.l);
        var on = {}, regimes = [];
        fig.controls.forEach(function (c) {
          if (c.regime) { on[c.regime] = Boolean(v[c.name]); regimes.push(c.regime); }
        });
        var shown = data.series.filter(function (s) { return on[s.regime]; });
        var series = [], markers = [], values = {}, parts = [], lowest = 0;
        shown.forEach(function (s) {
          var stored = s.log10_r[qi], ys = [], gone = false;
          stored.slice(0, L + 1).forEach(function (y) {   // gaps where unresolved; off the plot below its bottom
            if (gone || !fig.resolvedY(s, y, data)) { ys.push(null); return; }
            if (y < fig.bottom) { gone = true; }
            ys.push(Math.max(y, fig.bottom));
            lowest = Math.min(lowest, Math.max(y, fig.bottom));
          });
          series.push({name: s.name, color: s.colour, ys: ys, xs: ys.map(function (y, i) { return i; })});
          if (v.l < stored.length) {
            var at = stored[v.l];
            values[s.name] = at;
            if (fig.resolvedY(s, at, data) && at >= fig.bottom) { markers.push({x: v.l, y: at, color: s.colour}); }
          }
        });
        regimes.forEach(function (regime) {
          if (!on[regime]) { return; }
          var said = data.series.filter(function (s) { return s.regime === regime; }).map(function (s) {
            var n = s.log10_r[qi].length - 1;
            return s.name + " " + (v.l <= n ? fig.say(s, s.log10_r[qi][v.l], data) : "(run to depth " + n + " only)");
          });
          parts.push(regime + ": " + said.join(", "));
        });
        if (!shown.length) { parts.push("no regime chosen: tick one above the plot"); }
        var ymin = Math.max(fig.bottom, Math.floor(lowest) - 1);   // the range follows the curves shown
        var rank = Math.floor(v.q * (data.draws - 1) / 100) + 1;
        var which = v.q === 50 ? "the median draw" : v.q === 0 ? "the lowest draw" : v.q === 100 ? "the highest draw" :
          "the draw at the " + v.q + "th percentile";
        var head = fig.headline in values ? values[fig.headline] : values[Object.keys(values)[0]];
        return {spec: {series: series, xmin: 0, xmax: L, ymin: ymin, ymax: 0, legend: false, markers: markers,
                       hlines: data.resolved > ymin ? [{y: data.resolved, label: "direct runs resolve r > 1e" + data.resolved}] : [],
                       xlabel: "depth l", ylabel: "log10 r_l"},
                value: head === undefined || head === null ? "" : head, values: values,
                text: "Depth " + v.l + ", " + which + " (rank " + rank + " of " + data.draws + " random stacks) — " +
                  parts.join("; ") + "."};
      }
    },
    K3: {
      // Measurements (notebooks/10-ffn-memory.ipynb stores them): per model and block, the mean share
      // of a token's FFN mass sum_k |a_k| ||v_k|| held by its largest slots, and of an attention row's
      // weight held by its largest keys, at the stored shares of the support.
      title: "K3 · how many FFN slots and attention keys carry a token",
      stored: true,
      controls: [{name: "model", label: "model (1 MiniLM, 2 SmolLM2, 3 Gemma 3)", min: 1, max: 3, step: 1, value: 2},
                 {name: "block", label: "block", min: 1, max: 30, step: 1, value: 15}],
      draw: function (v, data) {
        var m = data.models[v.model - 1], b = Math.min(v.block, m.blocks), xs = data.fractions;
        var diagonal = xs.map(function (x) { return x; });
        var s90 = m.slots90[b - 1], a90 = m.attention90[b - 1];
        return {spec: {series: [{name: "FFN slots", xs: xs, ys: m.ffn[b - 1]},
                                {name: "attention keys", xs: xs, ys: m.attention[b - 1]},
                                {name: "even spread", xs: xs, ys: diagonal}],
                       logx: true, ymin: 0, ymax: 1, xlabel: "share of slots / keys (largest first)",
                       ylabel: "share of the mass", marker: {x: Math.max(s90, xs[0]), y: data.mass}},
                value: s90, values: {slots90: s90, attention90: a90},
                text: m.name + ", block " + b + " of " + m.blocks + ": a token needs " + fmt(s90) +
                  " of the FFN's slots for " + fmt(data.mass) + " of its mass; an attention row needs " +
                  fmt(a90) + " of its keys."};
      }
    },
    W1: {
      // One row of a differential head (notebooks/10-ffn-memory.ipynb stores its two score rows): the
      // weights softmax(s1) - lambda softmax(beta s2) over the keys, computed here from the scores.
      title: "W1 · differential weights A₁ − λA₂ of one row",
      stored: true,
      controls: [{name: "lambda", label: "λ", min: 0, max: 1, step: 0.05, value: 0.8},
                 {name: "beta", label: "sharpness of A₂", min: 0.25, max: 4, step: 0.25, value: 1}],
      draw: function (v, data) {
        var a1 = softmax(data.first), a2 = softmax(data.second.map(function (s) { return v.beta * s; }));
        var w = a1.map(function (x, j) { return x - v.lambda * a2[j]; });
        var keys = w.map(function (x, j) { return j + 1; });
        var sum = w.reduce(function (a, b) { return a + b; }, 0);
        var negative = w.filter(function (x) { return x < 0; }).length;
        return {spec: {series: [{name: "A₁", xs: keys, ys: a1}, {name: "λA₂", xs: keys, ys: a2.map(function (x) { return v.lambda * x; })},
                                {name: "A₁ − λA₂", xs: keys, ys: w}],
                       ymin: -1, ymax: 1, xlabel: "key j", ylabel: "weight", hlines: [{y: 0, label: ""}]},
                value: sum, values: {negative: negative},
                text: "λ = " + fmt(v.lambda) + ": the row's weights sum to " + fmt(sum) + " (1 − λ); " + negative +
                  " of " + w.length + " are negative."};
      }
    },
    P3: {
      // Measurements (notebooks/10b-basis-and-gates.ipynb stores them): for each model of the page and
      // each angle of a rotation in one plane of its stream, log10 of the relative error between the
      // model and its compensated rotation (floored at 1e-17: round-off).
      title: "P1–P3 · which models notice a rotation of their stream",
      stored: true,
      colours: ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00"],
      controls: [{name: "step", label: "angle θ (step of π/9)", min: 0, max: 9, step: 1, value: 3}],
      draw: function (v, data) {
        var fig = FIGURES.P3, i = Math.min(v.step, data.thetas.length - 1), theta = data.thetas[i];
        var series = [], markers = [], values = {}, parts = [];
        data.curves.forEach(function (c, k) {
          var colour = fig.colours[k % fig.colours.length];
          series.push({name: c.name, xs: data.thetas, ys: c.log10_error, color: colour});
          markers.push({x: theta, y: c.log10_error[i], color: colour});
          values[c.name] = c.log10_error[i];
          parts.push(c.name + " " + (c.log10_error[i] <= data.floor ? "at round-off (below 1e" + data.floor + ")" :
                                     fmt(Math.pow(10, c.log10_error[i]))));
        });
        return {spec: {series: series, xmin: 0, xmax: Math.PI, ymin: data.floor - 0.5, ymax: 1, markers: markers,
                       xlabel: "angle θ (radians)", ylabel: "log10 relative error"},
                value: values[data.curves[0].name], values: values,
                text: "θ = " + fmt(theta) + " rad, relative error — " + parts.join("; ") + "."};
      }
    }
  };

  function build(box) {
    var fig = FIGURES[box.dataset.figure];
    if (!fig) { return; }
    var data = null;
    if (fig.stored) {   // the notebook's numbers, stored in the div (attnref/book/interactive.py)
      var island = box.querySelector('script[type="application/json"]');
      if (!island) { return; }
      try { data = JSON.parse(island.textContent); } catch (e) { return; }
    }
    var values = {};
    var title = document.createElement("p");
    title.className = "interactive-title";
    title.textContent = fig.title + " (move the controls)";
    box.appendChild(title);
    var controls = document.createElement("div");
    controls.className = "interactive-controls";
    box.appendChild(controls);
    var svg = svgEl("svg", {viewBox: "0 0 " + BASE_W + " 250", role: "img"});
    box.appendChild(svg);
    var out = document.createElement("p");
    out.className = "interactive-value";
    out.setAttribute("aria-live", "polite");
    box.appendChild(out);
    function redraw() {
      var r = fig.draw(values, data);
      plot(svg, r.spec);
      svg.setAttribute("aria-label", r.text);
      out.textContent = r.text;
      box.dataset.value = String(r.value);
      if (r.values) { box.dataset.values = JSON.stringify(r.values); }
    }
    fig.controls.forEach(function (c) {
      var label = document.createElement("label");
      var input = document.createElement("input");
      input.name = c.name;
      if (c.type === "checkbox") {   // a toggle; its label names the curves it shows, in their colours
        input.type = "checkbox";
        input.checked = Boolean(c.value);
        values[c.name] = c.value ? 1 : 0;
        input.addEventListener("input", function () { values[c.name] = input.checked ? 1 : 0; redraw(); });
        label.style.display = "block";   // a line of its own: the curves' names wrap on a phone
        label.appendChild(input);
        label.appendChild(document.createTextNode(" " + c.label + ":"));
        (data ? data.series : []).forEach(function (s) {
          if (s.regime !== c.regime) { return; }
          var key = document.createElement("span");
          key.style.whiteSpace = "nowrap";
          var swatch = document.createElement("span");
          swatch.style.color = s.colour;
          swatch.textContent = "\u25a0 ";
          key.appendChild(swatch);
          key.appendChild(document.createTextNode(s.name));
          label.appendChild(document.createTextNode(" "));
          label.appendChild(key);
        });
        controls.appendChild(label);
        return;
      }
      input.type = "range";
      var shown = document.createElement("output");
      if (c.log) {   // the slider moves log10 of the value; the value is rounded to its step
        input.min = Math.log10(c.min); input.max = Math.log10(c.max); input.step = "any";
        input.value = Math.log10(c.value);
      } else {
        input.min = c.min; input.max = c.max; input.step = c.step; input.value = c.value;
      }
      var read = function () {
        var x = c.log ? Math.pow(10, Number(input.value)) : Number(input.value);
        x = Math.round(x / c.step) * c.step;
        values[c.name] = Math.min(c.max, Math.max(c.min, Number(x.toFixed(6))));
        shown.textContent = fmt(values[c.name]);
        // a screen reader announces the value shown, not the slider's position (log10 of it)
        input.setAttribute("aria-valuetext", fmt(values[c.name]));
      };
      input.addEventListener("input", function () { read(); redraw(); });
      read();
      label.appendChild(document.createTextNode(c.label + " "));
      label.appendChild(input);
      label.appendChild(shown);
      controls.appendChild(label);
    });
    box.hidden = false;   // shown first: the plot is laid out at the width the page gives it
    redraw();
    var drawnAt = svg.getBoundingClientRect().width;
    var again = function () {   // a new width (a phone turned, a window resized) or the page's fonts loaded
      var w = svg.getBoundingClientRect().width;
      if (w > 0 && Math.abs(w - drawnAt) > 0.5) { drawnAt = w; redraw(); }
    };
    if (window.ResizeObserver) { new ResizeObserver(again).observe(svg); } else { window.addEventListener("resize", again); }
    if (document.fonts && document.fonts.ready) { document.fonts.ready.then(function () { drawnAt = -1; again(); }); }
  }
  function start() {
    document.querySelectorAll(".interactive-figure[data-figure]").forEach(build);
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
