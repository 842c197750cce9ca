/* agentq console: the little the pages do in the browser (the CSP allows only
   this file and htmx, no inline script). Every page works without it, except
   "select all" and the confirmation before a bulk delete. */
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("input[data-selects]").forEach(function (all) {
    all.addEventListener("change", function () {
      document.querySelectorAll(all.dataset.selects).forEach(function (box) {
        box.checked = all.checked;
      });
    });
  });
  document.querySelectorAll("[data-confirm]").forEach(function (button) {
    button.addEventListener("click", function (event) {
      if (!window.confirm(button.dataset.confirm)) {
        event.preventDefault();
      }
    });
  });
});
