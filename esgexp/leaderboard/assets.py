"""The page's own style sheet and script (inlined into index.html beside plotly's bundle).

PAGE_JS sorts a table when a column header is clicked (numbers by value, text alphabetically, again
for the other direction), filters table rows by the text typed above them, and draws every figure from
its JSON block; the model x question heatmap gets its hover text put together here from one copy of
each question, so the page does not carry a question's text once per model. ``body[data-rendered]``
becomes ``done`` when every figure is drawn (the tests and the benchmark wait for it); the performance
marks ``esgexp:script`` (plotly's bundle evaluated) and ``esgexp:rendered`` time the two parts."""

PAGE_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1400px; color: #222; padding: 0 1rem; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; } h3 { margin-top: 1.6rem; }
nav a { margin-right: 1rem; } .note { color: #666; font-size: .9rem; }
table.board { border-collapse: collapse; font-size: .85rem; margin-top: .4rem; width: 100%; }
table.board th, table.board td { border-bottom: 1px solid #e5e5e5; padding: .25rem .5rem; text-align: left; white-space: nowrap; }
table.board th { cursor: pointer; background: #f6f6f6; position: sticky; top: 0; user-select: none; }
table.board th[aria-sort=ascending]::after { content: " ▲"; } table.board th[aria-sort=descending]::after { content: " ▼"; }
table.board td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.mark-best, td.mark-yes { color: #1a7f37; font-weight: 600; } td.mark-no { color: #b42318; }
input.filter { padding: .3rem .5rem; width: 20rem; }
details.card { border: 1px solid #ddd; border-radius: 4px; margin: .4rem 0; padding: .3rem .7rem; }
details.card summary { cursor: pointer; } details.card dl { display: grid; grid-template-columns: 12rem 1fr; gap: .2rem 1rem; }
details.card dt { color: #555; } details.card dd { margin: 0; font-family: ui-monospace, monospace; font-size: .8rem; overflow-wrap: anywhere; }
details.card pre { white-space: pre-wrap; margin: 0; }
.plot { min-height: 200px; } div.scroll { overflow-x: auto; }
"""

PAGE_JS = r"""
(function () {
  performance.mark("esgexp:script");
  function cellValue(row, index) {
    const cell = row.cells[index];
    const key = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    const number = parseFloat(key);
    return key !== "" && !isNaN(number) && isFinite(key) ? number : key.toLowerCase();
  }
  function sortBy(table, index, header) {
    const body = table.tBodies[0];
    const descending = header.getAttribute("aria-sort") === "ascending";
    const rows = Array.from(body.rows);
    rows.sort(function (a, b) {
      const x = cellValue(a, index), y = cellValue(b, index);
      if (x === y) return 0;
      if (x === "") return 1;
      if (y === "") return -1;
      const order = (typeof x === typeof y) ? (x < y ? -1 : 1) : (typeof x === "number" ? -1 : 1);
      return descending ? -order : order;
    });
    table.querySelectorAll("th").forEach(function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
    rows.forEach(function (row) { body.appendChild(row); });
  }
  document.querySelectorAll("table.board").forEach(function (table) {
    Array.from(table.tHead.rows[0].cells).forEach(function (header, index) {
      header.addEventListener("click", function () { sortBy(table, index, header); });
    });
  });
  document.querySelectorAll("input.filter").forEach(function (input) {
    const table = document.getElementById(input.dataset.table);
    input.addEventListener("input", function () {
      const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      Array.from(table.tBodies[0].rows).forEach(function (row) {
        const text = row.textContent.toLowerCase();
        row.hidden = !words.every(function (word) { return text.includes(word); });
      });
    });
  });

  function escapeText(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  function wrap(text, width, most) {
    text = String(text);
    if (text.length > most) text = text.slice(0, most) + "…";
    const lines = [];
    text.split("\n").forEach(function (paragraph) {
      let line = "";
      paragraph.split(" ").forEach(function (word) {
        if (line && line.length + word.length + 1 > width) { lines.push(line); line = word; }
        else line = line ? line + " " + word : word;
      });
      lines.push(line);
    });
    return lines.map(escapeText).join("<br>");
  }
  function questionHover(m) {
    const n = m.models.length;
    const columns = m.ids.map(function (id, c) {
      const q = m.questions[c];
      return {
        head: "question " + escapeText(id) + " · difficulty " + m.difficulty[c].toFixed(2) +
          " (missed by " + Math.round(m.difficulty[c] * 100) + "% of models)",
        body: (q[0] ? wrap(q[0], 100, 600) + "<br>" + wrap(q[1], 100, 800) + "<br>" : ""),
        gold: "gold: <b>" + escapeText(q[2]) + "</b>"
      };
    });
    return m.models.map(function (model, r) {
      const who = "<b>" + escapeText(model) + "</b> · rank " + (r + 1) + " of " + n +
        " (accuracy " + m.accuracy[r].toFixed(3) + ")<br>";
      const answers = m.answers[r];
      return columns.map(function (q, c) {
        return who + q.head + "<br>" + q.body + q.gold + " · answer: <b>" + escapeText(answers[c] || "none") + "</b>";
      });
    });
  }
  const drawn = [];
  document.querySelectorAll("script[data-figure]").forEach(function (block) {
    const figure = JSON.parse(block.textContent);
    if (block.dataset.questions) {
      const matrix = JSON.parse(document.getElementById(block.dataset.questions).textContent);
      figure.data[0].text = questionHover(matrix);
    }
    const target = document.getElementById(block.dataset.figure);
    drawn.push(Plotly.newPlot(target, figure.data, figure.layout, {displaylogo: false, responsive: true}));
  });
  Promise.all(drawn).then(function () {
    performance.mark("esgexp:rendered");
    document.body.dataset.rendered = "done";
  });
})();
"""
