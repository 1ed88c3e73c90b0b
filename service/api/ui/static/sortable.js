/* tunehub UI: every table with a header row sorts by the column whose header is clicked
   (again: the other way). A cell sorts by its data-sort attribute when it has one, else by
   its text; a value that is a number compares as a number, and numbers inside a text compare
   as numbers too (k=256 before k=1024 before k=16384); empty cells go last. Only the rows of
   the page shown are sorted. No dependencies, nothing loaded from elsewhere. */
(function () {
  "use strict";
  var RUNS = /(\d+(?:\.\d+)?)/;

  function cellValue(row, index) {
    var cell = row.cells[index];
    if (!cell) return "";
    var sort = cell.getAttribute("data-sort");
    return (sort !== null ? sort : cell.textContent).trim();
  }

  function parts(text) {
    // split() with a capture group puts the numbers at the odd places
    return text.split(RUNS).map(function (part, i) {
      return i % 2 ? Number(part) : part.toLowerCase();
    }).filter(function (part, i) { return i % 2 || part !== ""; });
  }

  function compare(a, b) {
    if (a === b) return 0;
    if (a === "" || a === "–" || a === "-") return 1;
    if (b === "" || b === "–" || b === "-") return -1;
    var x = Number(a), y = Number(b);
    if (isFinite(x) && isFinite(y)) return x - y;
    var p = parts(a), q = parts(b);
    for (var i = 0; i < Math.min(p.length, q.length); i++) {
      if (p[i] === q[i]) continue;
      var pn = typeof p[i] === "number", qn = typeof q[i] === "number";
      if (pn && qn) return p[i] - q[i];
      if (pn !== qn) return pn ? -1 : 1;
      return p[i] < q[i] ? -1 : 1;
    }
    return p.length - q.length;
  }

  function sortBy(table, header, index) {
    var body = table.tBodies[0];
    if (!body) return;
    var descending = header.getAttribute("aria-sort") === "ascending";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r, s) {
      var a = cellValue(r, index), b = cellValue(s, index);
      var empty = (a === "" || a === "–") - (b === "" || b === "–");
      if (empty) return empty; // empty last either way
      return descending ? compare(b, a) : compare(a, b);
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(header.parentNode.cells, function (th) {
      th.removeAttribute("aria-sort");
    });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }

  function install(table) {
    if (!table.tHead || !table.tHead.rows.length) return;
    table.classList.add("sortable");
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      th.tabIndex = 0;
      th.title = th.title || "sort by this column (click again: the other way)";
      th.addEventListener("click", function () { sortBy(table, th, index); });
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          sortBy(table, th, index);
        }
      });
    });
  }

  function installAll() {
    Array.prototype.forEach.call(document.querySelectorAll("table"), install);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", installAll);
  } else {
    installAll();
  }
})();
