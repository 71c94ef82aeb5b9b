/* Folded evidence (book/_ext/claimsbook): open every evidence fold for printing, close the ones the reader
   had closed afterwards. The page works without this script; it only makes a printout complete
   where the browser does not print folded content (print.css does it with ::details-content). */
(function () {
  var opened = [];
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details.evidence-fold:not([open])").forEach(function (d) {
      d.open = true; opened.push(d);
    });
  });
  window.addEventListener("afterprint", function () {
    opened.forEach(function (d) { d.open = false; });
    opened = [];
  });
})();
