// On a narrow screen console.css shows each table row as a card; each cell is labelled with
// its column's header, read here once so that the labels have one source: the table's head.
for (const table of document.querySelectorAll("#result_list, table.reflow")) {
  const labels = [...table.querySelectorAll("thead th")].map((th) =>
    (th.querySelector(".text") || th).textContent.trim(),
  );
  for (const row of table.querySelectorAll("tbody tr")) {
    if (row.cells.length !== labels.length) continue; // a heading row spanning the table
    [...row.cells].forEach((cell, index) => {
      // An empty cell gets no label: a card would show "reason and details:" and nothing.
      if (labels[index] && cell.textContent.trim()) cell.dataset.label = labels[index];
    });
  }
}
