// The site's behaviour (book/_ext/book_site.py).
// * Displayed equations fit the column. On a phone a display too wide to sit beside its number
//   moves below it and takes the column's whole width (class eqno-apart). MathJax 3 cannot break a long display into lines, so a
//   prose equation up to 1/MIN_SCALE times wider than its column is typeset a little smaller to
//   fit; a wider one (or any on a narrow screen) keeps its size and scrolls inside itself
//   (book.css). Equations in cell outputs (sympy) always scroll.
// * A formula (inline or displayed) that scrolls inside itself shows a shadow on the side where
//   more of it is hidden (classes math-more-left / math-more-right, book.css).
// * Every menu and contents button opens its sidebar: pydata-sphinx-theme 0.17.1 (and
//   sphinx-book-theme 1.3.0) wire only the FIRST .primary-toggle / .secondary-toggle of the page,
//   which sphinx-book-theme hides, so the visible buttons did nothing after a click
//   (pydata-sphinx-theme#2451). A click on any other toggle is handed to the wired one.
// * Hover previews of equations, glossary terms, references and sections (previews).
// * A "Show code / Hide code" switch in a chapter's header opens or folds all its code (codeSwitch).
// * A link into a page lands on its heading and stays there while formulas and figures above it
//   take their size (holdTarget).
// * Math in the search page's results is typeset as the results arrive, and each result's
//   snippet is read text: formulas as plain symbols (no TeX source), no code cells, no section
//   headings run together, starting at a word (Sphinx's searchtools.js takes the raw text of the
//   page, TeX included, and may start mid-word).
(function () {
  "use strict";
  // A phone's column is narrow: a display may shrink further there (to 68 %: about the size of
  // the running text's small print) before it scrolls inside itself with a shadow as its cue.
  var MIN_SCALE = 0.78, MIN_SCALE_PHONE = 0.68;
  // Tables on a phone (claims.css): every cell gets its column's name (data-label), and a table
  // wider than its column is stacked into one card per row (class stacked; the generated claims and
  // evidence tables always stack below 600 px, by CSS alone).
  var PHONE = "(max-width: 600px)";
  function labelTables() {
    var tables = document.querySelectorAll(".bd-article table");
    for (var i = 0; i < tables.length; i++) {
      var heads = tables[i].querySelectorAll("thead th");
      if (!heads.length) { continue; }
      var names = Array.prototype.map.call(heads, function (th) { return th.textContent.trim(); });
      var rows = tables[i].querySelectorAll("tbody tr");
      for (var r = 0; r < rows.length; r++) {
        for (var c = 0; c < rows[r].children.length; c++) {
          if (names[c]) { rows[r].children[c].setAttribute("data-label", names[c]); }
        }
      }
    }
  }
  function stackWideTables() {
    var narrow = window.matchMedia && window.matchMedia(PHONE).matches;
    var tables = document.querySelectorAll(".bd-article table");
    for (var i = 0; i < tables.length; i++) {
      var t = tables[i];
      if (t.closest(".claims-table, .evidence-table") || t.classList.contains("claims-compact")) { continue; }
      t.classList.remove("stacked");
      if (!narrow || !t.querySelector("thead th")) { continue; }
      var box = t.parentElement;
      if (box && box.clientWidth > 0 && t.getBoundingClientRect().width > box.clientWidth + 1) {
        t.classList.add("stacked");
      }
    }
  }
  function fit() {
    stackWideTables();
    var displays = document.querySelectorAll("div.math > mjx-container[display='true']");
    for (var i = 0; i < displays.length; i++) {
      var box = displays[i];
      if (box.closest(".cell_output")) { continue; }
      box.style.fontSize = "";
      var display = box.parentElement;
      display.classList.remove("eqno-apart");
      var math = box.querySelector("mjx-math");
      if (!math) { continue; }
      var need = math.getBoundingClientRect().width, have = box.clientWidth;
      var phone = window.matchMedia && window.matchMedia(PHONE).matches;
      // On a phone a display that does not fit beside its number gets the whole column, its
      // number above it on the right (class eqno-apart, book.css).
      if (need > have && phone && display.querySelector(".eqno")) {
        display.classList.add("eqno-apart");
        have = box.clientWidth;
      }
      if (need > have && have > 0) {
        var scale = (have - 2) / need;
        var floor = phone ? MIN_SCALE_PHONE : MIN_SCALE;
        if (scale >= floor) { box.style.fontSize = (100 * scale).toFixed(1) + "%"; }
      }
    }
    breakWideInline().then(function () {
      cueScrolling();
      document.documentElement.dataset.mathFitted = "yes";
    });
  }
  // An inline formula wider than its line (65 at 360 px, the widest 729 px in a 283 px line) is
  // broken, as TeX breaks a formula in running text: at its top-level relations (=, ≤, →, ...),
  // then its top-level + and − and commas, into pieces that wrap like words (class math-broken; a
  // piece that starts with an operator keeps its spacing, "{}+"). A piece still wider than the
  // line is typeset smaller to fit, down to MIN_SCALE_PHONE; only one wider than that scrolls.
  var RELATION = /^(=|<|>|\\(le|leq|ge|geq|ne|neq|approx|to|in|sim|simeq|propto|equiv|mapsto|leftarrow|rightarrow|Rightarrow|Leftrightarrow|iff|ll|gg|subset|subseteq)(?![A-Za-z]))/;
  function splitTex(tex) {
    var cuts = [[], []], depth = 0, paren = 0, env = 0, last = "";
    for (var i = 0; i < tex.length; i++) {
      var ch = tex[i];
      if (ch === "\\") {
        var name = /^\\([A-Za-z]+|.)/.exec(tex.slice(i))[0];
        if (name === "\\left" || name === "\\begin") { env++; }
        if (name === "\\right" || name === "\\end") { env--; }
        if (!depth && !paren && !env && last && RELATION.test(tex.slice(i))) { cuts[0].push(i); }
        i += name.length - 1;
        last = name;
        continue;
      }
      if (ch === "{") { depth++; } else if (ch === "}") { depth--; }
      else if (ch === "(" || ch === "[") { paren++; } else if (ch === ")" || ch === "]") { paren--; }
      else if (!depth && !paren && !env && last) {
        if (ch === "=" || ch === "<" || ch === ">") { if (!/[=<>]$/.test(last)) { cuts[0].push(i); } }
        else if ((ch === "+" || ch === "-") && !/[\^_{(\[,=<>+\-*\/]$|^\\(left|right|le|leq|ge|geq|ne|to|in|approx|cdot|times)$/.test(last)) { cuts[1].push(i); }
        else if (ch === ",") { cuts[1].push(i + 1); }
      }
      if (!/\s/.test(ch)) { last = ch; }
    }
    var at = cuts[0].length ? cuts[0].concat(cuts[1]) : cuts[1];
    at.sort(function (a, b) { return a - b; });
    var pieces = [], start = 0;
    at.forEach(function (cut) {
      if (cut > start && tex.slice(start, cut).trim()) { pieces.push(tex.slice(start, cut).trim()); start = cut; }
    });
    pieces.push(tex.slice(start).trim());
    return pieces.filter(Boolean).map(function (piece) { return /^[=<>+\-\\]/.test(piece) && !/^\\[A-Za-z]+[({]/.test(piece) ? "{}" + piece : piece; });
  }
  function lineWidth(el) {
    var block = el.parentElement;
    while (block && getComputedStyle(block).display.indexOf("inline") === 0) { block = block.parentElement; }
    if (!block) { return 0; }
    var style = getComputedStyle(block);
    return block.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  }
  var INLINE = ".bd-article span.math";
  function inlineToFit() {
    return Array.prototype.filter.call(document.querySelectorAll(INLINE), function (span) {
      if (span.closest(".cell_output, .cell_input, table, .interactive-figure")) { return false; }
      var box = span.querySelector("mjx-container");
      return box && box.getBoundingClientRect().width > lineWidth(span) + 1;
    });
  }
  function shrinkToLine(spans) {
    spans.forEach(function (span) {
      var box = span.querySelector("mjx-container"), have = lineWidth(span);
      box.style.fontSize = "";
      var need = box.getBoundingClientRect().width;
      if (need > have + 1 && have > 0 && (have - 2) / need >= MIN_SCALE_PHONE) {
        box.style.fontSize = (100 * (have - 2) / need).toFixed(1) + "%";
      }
    });
  }
  function breakWideInline() {
    var wide = inlineToFit();
    var doc = window.MathJax && MathJax.startup && MathJax.startup.document;
    if (!wide.length || !doc || !doc.getMathItemsWithin || !MathJax.typesetPromise) {
      shrinkToLine(wide);
      return Promise.resolve();
    }
    var made = [];
    wide.forEach(function (span) {
      var items = doc.getMathItemsWithin(span);
      if (!items.length || items[0].display) { return; }
      var pieces = splitTex(items[0].math);
      if (pieces.length < 2) { return; }
      var broken = document.createElement("span");
      broken.className = "math-broken";
      pieces.forEach(function (piece, k) {
        if (k) { broken.appendChild(document.createTextNode(" ")); }
        var part = broken.appendChild(document.createElement("span"));
        part.className = "math notranslate nohighlight";
        part.textContent = "\\(" + piece + "\\)";
      });
      MathJax.typesetClear([span]);
      span.replaceWith(broken);
      made.push(broken);
    });
    var done = made.length ? MathJax.typesetPromise(made) : Promise.resolve();
    return done.then(function () { shrinkToLine(inlineToFit()); }, function () { shrinkToLine(inlineToFit()); });
  }
  // An inline formula wider than its line scrolls (class math-scrolls); a shadow marks each side of
  // a formula's scroll box where part of the formula is out of view. Widths are the formula's
  // box (mjx-container inline, mjx-math displayed), not the scroll width, which counts the few
  // pixels an italic letter's box reaches past the formula.
  var SCROLL_BOXES = ".bd-article span.math, .bd-article mjx-container[display='true']";
  function cue(box) {
    var inline = box.matches("span.math");
    var inner = box.querySelector(inline ? "mjx-container" : "mjx-math");
    if (!inner) { return; }
    if (inline) {
      box.classList.remove("math-scrolls");
      box.classList.toggle("math-scrolls", inner.getBoundingClientRect().width > box.clientWidth + 1);
    }
    var wide = inner.getBoundingClientRect().width > box.clientWidth + 1;
    var hidden = box.scrollWidth - box.clientWidth;
    box.classList.toggle("math-more-left", wide && box.scrollLeft > 1);
    box.classList.toggle("math-more-right", wide && box.scrollLeft < hidden - 1);
  }
  function cueScrolling() {
    var boxes = document.querySelectorAll(SCROLL_BOXES);
    for (var i = 0; i < boxes.length; i++) {
      var box = boxes[i];
      cue(box);
      if (!box.dataset.cueListener) {
        box.dataset.cueListener = "yes";
        box.addEventListener("scroll", function (event) { cue(event.currentTarget); }, {passive: true});
      }
    }
  }
  // Hand a click on a toggle the theme did not wire to the first one of its kind, which it did.
  function wireToggles() {
    ["primary-toggle", "secondary-toggle"].forEach(function (kind) {
      var toggles = document.querySelectorAll("." + kind);
      for (var i = 1; i < toggles.length; i++) {
        toggles[i].addEventListener("click", function (event) {
          event.preventDefault();
          event.stopPropagation();
          toggles[0].click();
        });
      }
    });
  }
  // A drawer (the menu or the contents, a modal <dialog> on a narrow screen) closes once the reader
  // picks a link in it: pydata-sphinx-theme 0.17.1 left the contents drawer open over the section
  // the reader asked for, taking every tap.
  function closeDrawersOnNavigation() {
    ["pst-primary-sidebar-modal", "pst-secondary-sidebar-modal"].forEach(function (id) {
      var dialog = document.getElementById(id);
      if (!dialog) { return; }
      dialog.addEventListener("click", function (event) {
        var link = event.target.closest && event.target.closest("a[href]");
        if (!link || !dialog.open || event.defaultPrevented) { return; }
        var href = link.getAttribute("href");
        if (href.charAt(0) === "#") {   // a section of this page: go there once the drawer is closed
          event.preventDefault();       // and the theme has given the focus back to the header
          dialog.addEventListener("close", function () {
            setTimeout(function () {
              var target = document.getElementById(decodeURIComponent(href.slice(1)));
              if (location.hash !== href) { location.hash = href; } else if (target) { target.scrollIntoView(); }
            }, 0);
          }, {once: true});
        }
        dialog.close();
      });
    });
  }
  // The search page lists page titles, some with math (√d_k): typeset them as they arrive.
  function typesetSearchResults() {
    var results = document.getElementById("search-results");
    if (!results || !window.MutationObserver) { return; }
    new MutationObserver(function () {
      var pending = results.querySelectorAll(".math:not(:has(mjx-container))");
      if (pending.length && window.MathJax && MathJax.typesetPromise) { MathJax.typesetPromise(Array.from(pending)); }
    }).observe(results, {childList: true, subtree: true});
  }
  // TeX source of a formula as plain text for a snippet: \\sqrt{d_k} -> √d_k, W_K^\\top -> W_Kᵀ.
  var SYMBOLS = {cdot: "·", top: "ᵀ", times: "×", le: "≤", leq: "≤", ge: "≥", geq: "≥", ne: "≠", neq: "≠",
    approx: "≈", gg: "≫", ll: "≪", sim: "∼", propto: "∝", in: "∈", to: "→", infty: "∞", sum: "Σ", prod: "Π", partial: "∂", nabla: "∇", pm: "±",
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", eta: "η", theta: "θ",
    lambda: "λ", mu: "μ", pi: "π", rho: "ρ", sigma: "σ", tau: "τ", phi: "φ", varphi: "φ", psi: "ψ",
    omega: "ω", Sigma: "Σ", Delta: "Δ", Phi: "Φ", Omega: "Ω", ell: "ℓ", circ: "∘", odot: "⊙", otimes: "⊗",
    langle: "⟨", rangle: "⟩", lVert: "‖", rVert: "‖", Vert: "‖", mid: "|", ldots: "…", cdots: "⋯", dots: "…",
    mathbb: "", mathbf: "", mathrm: "", operatorname: "", text: "", mathcal: "", boldsymbol: "", left: "", right: "",
    big: "", Big: "", bigl: "", bigr: "", quad: " ", qquad: " ", hat: "", tilde: "", bar: "", tfrac: "", dfrac: ""};
  var SUPERSCRIPTS = {"0": "⁰", "1": "¹", "2": "²", "3": "³", "4": "⁴", "5": "⁵", "6": "⁶", "7": "⁷", "8": "⁸",
    "9": "⁹", "+": "⁺", "-": "⁻", "i": "ⁱ", "n": "ⁿ", "T": "ᵀ", "Q": "Q", "K": "K", "V": "V", "O": "O", "h": "ʰ",
    "k": "ᵏ", "l": "ˡ", "j": "ʲ", "t": "ᵗ", "d": "ᵈ"};
  function texToText(tex) {
    var out = tex.replace(/\\[(\[]|\\[)\]]/g, " ")   // delimiters anywhere (after an equation's number too)
      .replace(/\\sqrt\s*\{([^{}]*)\}/g, function (_, x) { return x.length > 1 && /[^\w\\]/.test(x) ? "√(" + x + ")" : "√" + x; })
      .replace(/\\frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}/g, "($1)/($2)")
      .replace(/\^\s*\{?\\top\}?/g, "ᵀ")
      .replace(/\^\s*(?:\{([^{}]*)\}|([A-Za-z0-9]))/g, function (_, group, one) {
        var x = group !== undefined ? group : one, sup = "";
        for (var i = 0; i < x.length; i++) {
          if (!(x[i] in SUPERSCRIPTS)) { return "^(" + x + ")"; }
          sup += SUPERSCRIPTS[x[i]];
        }
        return sup;
      })
      .replace(/\\([A-Za-z]+)/g, function (_, name) { return name in SYMBOLS ? SYMBOLS[name] : name; })
      .replace(/\\[,;:! ]/g, " ").replace(/\\\|/g, "‖").replace(/\\([{}|_%&#$])/g, "$1")
      .replace(/[{}]/g, "").replace(/\s+/g, " ").trim();
    return out;
  }
  function readableText(htmlString, anchor) {
    var doc = new DOMParser().parseFromString(htmlString, "text/html");
    var main = (anchor && doc.querySelector('[role="main"] ' + anchor)) || doc.querySelector('[role="main"]');
    if (!main) { return ""; }
    main.querySelectorAll(".headerlink, script, style, .cell_input, .book-downloads, nav, .toctree-wrapper, " +
      "h1, h2, h3, h4, thead, .bd-header-article, .dropdown, button, .prev-next-area, .bd-footer-article, footer")
      .forEach(function (e) { e.remove(); });
    main.querySelectorAll(".math").forEach(function (m) {
      var text = texToText(m.textContent);
      m.replaceWith(m.tagName === "DIV" ? " " + text + " " : text);
    });
    main.querySelectorAll("p, li, td, th, div, dd, dt, pre").forEach(function (e) { e.append(" "); });
    return main.textContent.replace(/\s+/g, " ").trim();
  }
  function readableSnippets() {
    if (typeof Search === "undefined" || !Search.makeSearchSummary) { return; }
    Search.htmlToText = readableText;
    Search.makeSearchSummary = function (htmlText, keywords, anchor) {
      var text = readableText(htmlText, anchor);
      if (!text) { return null; }
      var lower = text.toLowerCase(), first = -1;
      Array.from(keywords).forEach(function (k) {
        var at = lower.indexOf(String(k).toLowerCase());
        if (at > -1 && (first < 0 || at < first)) { first = at; }
      });
      var start = Math.max(first - 100, 0);
      if (start > 0) {   // begin at a sentence if one starts shortly before, else at a word
        var sentence = text.lastIndexOf(". ", first);
        start = sentence >= start - 60 && sentence > 0 ? sentence + 2 : text.indexOf(" ", start) + 1;
      }
      var end = Math.min(text.length, start + 240);
      if (end < text.length) { var space = text.lastIndexOf(" ", end); if (space > start) { end = space; } }
      var summary = document.createElement("p");
      summary.classList.add("context");
      summary.textContent = (start > 0 ? "… " : "") + text.slice(start, end) + (end < text.length ? " …" : "");
      return summary;
    };
  }
  // A link into a page (a search hit, the claims index, an answer's badge) lands on its heading
  // and stays there while the page above it grows: on a phone the browser scrolled to the target
  // before MathJax had typeset the formulas and the figures had loaded above it, and the heading
  // ended 335-673 px down the screen (Chromium's scroll anchoring did not hold it). Until the
  // reader scrolls, taps, clicks or types, every change of the article's size puts the target
  // back where the browser first put it (the theme's 64 px below the top).
  function holdTarget() {
    var hash = location.hash;
    if (!hash || hash.length < 2 || !window.ResizeObserver) { return; }
    var target = null;
    try { target = document.getElementById(decodeURIComponent(hash.slice(1))); } catch (e) { return; }
    if (!target) { return; }
    var article = document.querySelector(".bd-article") || document.body;
    var held = true, observer = null;
    var inputs = ["wheel", "touchstart", "pointerdown", "keydown"];
    function release() {
      held = false;
      if (observer) { observer.disconnect(); }
      inputs.forEach(function (name) { window.removeEventListener(name, release, true); });
      window.removeEventListener("hashchange", release, true);
    }
    function place() {
      if (!held || location.hash !== hash) { return; }
      var pad = parseFloat(getComputedStyle(document.documentElement).scrollPaddingTop) || 0;
      var margin = parseFloat(getComputedStyle(target).scrollMarginTop) || 0;
      if (Math.abs(target.getBoundingClientRect().top - (pad + margin)) > 1) { target.scrollIntoView(); }
    }
    inputs.forEach(function (name) { window.addEventListener(name, release, {capture: true, passive: true}); });
    window.addEventListener("hashchange", function () { release(); setTimeout(holdTarget, 0); }, {capture: true, once: true});
    observer = new ResizeObserver(place);
    observer.observe(article);
    document.addEventListener("load", function (event) {   // a figure above the target has loaded
      if (event.target.tagName === "IMG") { place(); }
    }, true);
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) { MathJax.startup.promise.then(place); }
    place();
  }
  // On a phone a verdict's evidence with a failed check starts folded like the others (its summary
  // says "12/17 checks ✓ · 5 ✗"): open, each filled 4-7 screens of chapter 8. Wider screens show it open.
  function foldFailedEvidenceOnPhones() {
    if (!(window.matchMedia && window.matchMedia(PHONE).matches)) { return; }
    var folds = document.querySelectorAll("details.evidence-failed[open]"), target = null;
    try { target = location.hash ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null; } catch (e) { target = null; }
    for (var i = 0; i < folds.length; i++) {
      if (!target || !folds[i].contains(target)) { folds[i].open = false; }   // a link into it keeps it open
    }
  }
  // A switch in the page's header that shows or folds all of a chapter's code at once (the folds
  // are MyST-NB's, one per cell tagged hide-input); its label says what a click will do.
  function codeSwitch() {
    var folds = Array.prototype.slice.call(document.querySelectorAll(".bd-article details.hide.above-input"));
    var bar = document.querySelector(".article-header-buttons");
    if (folds.length < 2 || !bar) { return; }
    var button = document.createElement("button");
    button.type = "button";
    button.className = "btn btn-sm code-switch";
    function allOpen() { return folds.every(function (d) { return d.open; }); }
    function label() {
      var open = allOpen();
      button.textContent = open ? "Hide code" : "Show code";
      button.title = (open ? "Fold all " : "Show all ") + folds.length + " code cells of this page";
      button.setAttribute("aria-pressed", open ? "true" : "false");
    }
    button.addEventListener("click", function () {
      var open = !allOpen();
      folds.forEach(function (d) { d.open = open; });
      label();
    });
    document.addEventListener("toggle", function (event) {
      if (folds.indexOf(event.target) !== -1) { label(); }
    }, true);
    bar.insertBefore(button, bar.firstChild);
    label();
  }
  // Hover previews (as distill's and Sphinx's hoverxref): a link in the article to an equation, a
  // glossary term, a reference or a section shows the start of its target in a small box while the
  // pointer rests on it or the link has the keyboard's focus (Escape closes it). Not on a touch
  // screen, where a tap follows the link. A target on another page is read once (fetch, cached).
  function previews() {
    if (!window.matchMedia || !window.matchMedia("(hover: hover) and (pointer: fine)").matches || !window.fetch) { return; }
    var box = document.createElement("div");
    box.className = "link-preview";
    box.id = "link-preview";
    box.setAttribute("role", "tooltip");
    box.hidden = true;
    document.body.appendChild(box);
    var pages = {}, current = null, timer = null;
    function excerpt(doc, id) {
      var t = doc.getElementById(id);
      if (!t) { return null; }
      var parts = [];
      if (t.matches("div.math, span.math") || t.querySelector(":scope > mjx-container")) {
        parts.push(t);
      } else if (t.matches("section") || (t.nextElementSibling && t.nextElementSibling.matches("h1,h2,h3,h4"))) {
        var section = t.matches("section") ? t : t.parentElement;
        var heading = section.querySelector("h1,h2,h3,h4"), first = section.querySelector("p, dl, .math");
        if (heading) { parts.push(heading); }
        if (first) { parts.push(first); }
      } else {
        parts.push(t.closest("div.citation, li, dd, p, div.math, figure, table") || t);
      }
      var out = document.createElement("div");
      parts.forEach(function (part) {
        var copy = part.cloneNode(true);
        copy.removeAttribute("id");
        copy.querySelectorAll("[id]").forEach(function (e) { e.removeAttribute("id"); });
        copy.querySelectorAll(".headerlink, button, script").forEach(function (e) { e.remove(); });
        out.appendChild(copy);
      });
      return out.textContent.trim() ? out : null;
    }
    function page(url) {
      if (url === location.pathname) { return Promise.resolve(document); }
      if (!pages[url]) {
        pages[url] = fetch(url).then(function (r) { return r.ok ? r.text() : ""; }).then(function (text) {
          return new DOMParser().parseFromString(text, "text/html");
        });
      }
      return pages[url];
    }
    function hide() { clearTimeout(timer); current = null; box.hidden = true; box.textContent = ""; }
    function show(link) {
      var url = new URL(link.href, location.href);
      if (url.origin !== location.origin || !url.hash || url.hash.length < 2) { return; }
      current = link;
      page(url.pathname).then(function (doc) {
        if (current !== link) { return; }
        var found = excerpt(doc, decodeURIComponent(url.hash.slice(1)));
        if (!found) { return; }
        box.textContent = "";
        box.appendChild(found);
        box.hidden = false;
        var r = link.getBoundingClientRect(), width = Math.min(420, window.innerWidth - 16);
        box.style.width = width + "px";
        box.style.left = Math.max(8, Math.min(r.left + window.scrollX, window.scrollX + window.innerWidth - width - 8)) + "px";
        box.style.top = (r.bottom + window.scrollY + 6) + "px";
        link.setAttribute("aria-describedby", "link-preview");
        if (doc !== document && window.MathJax && MathJax.typesetPromise && box.querySelector(".math")) {
          MathJax.typesetPromise([box]).catch(function () {});
        }
      });
    }
    function linkOf(event) {
      var a = event.target.closest && event.target.closest(".bd-article a.reference.internal[href*='#']");
      return a && !a.classList.contains("headerlink") ? a : null;
    }
    function enter(event) {
      var a = linkOf(event);
      if (!a || a === current) { return; }
      clearTimeout(timer);
      timer = setTimeout(function () { show(a); }, 250);
    }
    function leave(event) {
      var a = linkOf(event);
      if (a && (!event.relatedTarget || !a.contains(event.relatedTarget)) && !box.contains(event.relatedTarget)) { hide(); }
    }
    box.addEventListener("mouseleave", hide);
    document.addEventListener("mouseover", enter);
    document.addEventListener("mouseout", leave);
    document.addEventListener("focusin", enter);
    document.addEventListener("focusout", leave);
    document.addEventListener("keydown", function (event) { if (event.key === "Escape") { hide(); } });
    window.addEventListener("scroll", function () { if (!box.hidden) { hide(); } }, {passive: true});
  }
  function start() {
    labelTables();
    document.addEventListener("toggle", function (event) {   // a table unfolded on a phone
      if (event.target.tagName === "DETAILS" && event.target.open) { stackWideTables(); cueScrolling(); }
    }, true);
    if (!document.querySelector(".math")) {
      stackWideTables();
      window.addEventListener("resize", stackWideTables);
      document.documentElement.dataset.mathFitted = "yes";
      return;
    }
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(fit);
      var timer = null;
      window.addEventListener("resize", function () { clearTimeout(timer); timer = setTimeout(fit, 150); });
    } else {
      setTimeout(start, 100);
    }
  }
  function ready(action) {
    if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", action); } else { action(); }
  }
  ready(wireToggles);
  ready(closeDrawersOnNavigation);
  ready(typesetSearchResults);
  ready(foldFailedEvidenceOnPhones);
  ready(codeSwitch);
  ready(previews);
  ready(holdTarget);
  readableSnippets();
  ready(start);
})();
