// Displayed equations fit the column (book/_ext/book_site.py). MathJax 3 cannot break a long
// display into lines, so a prose equation up to 1/MIN_SCALE times wider than its column is
// typeset a little smaller to fit; a wider one (or any on a narrow screen) keeps its size and
// scrolls inside itself (book.css). Equations in cell outputs (sympy) always scroll. Math in
// the search page's results is typeset as the results arrive.
(function () {
  "use strict";
  var MIN_SCALE = 0.78;
  function fit() {
    var displays = document.querySelectorAll("div.math > mjx-container[display='true']");
    for (var i = 0; i < displays.length; i++) {
      var box = displays[i];
      if (box.closest(".cell_output")) { continue; }
      box.style.fontSize = "";
      var math = box.querySelector("mjx-math");
      if (!math) { continue; }
      var need = math.getBoundingClientRect().width, have = box.clientWidth;
      if (need > have && have > 0) {
        var scale = (have - 2) / need;
        if (scale >= MIN_SCALE) { box.style.fontSize = (100 * scale).toFixed(1) + "%"; }
      }
    }
    document.documentElement.dataset.mathFitted = "yes";
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
  function start() {
    typesetSearchResults();
    if (!document.querySelector("div.math")) { document.documentElement.dataset.mathFitted = "yes"; return; }
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(fit);
      var timer = null;
      window.addEventListener("resize", function () { clearTimeout(timer); timer = setTimeout(fit, 150); });
    } else {
      setTimeout(start, 100);
    }
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
