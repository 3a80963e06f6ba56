// Line colours that stay put: a metric keeps its colour on every page (it follows the
// name, not the order charts were drawn in), and on the compare page a run keeps the
// colour of its row (the order the jobs were picked in, not the order their metrics
// happened to arrive in).

// Canvas strokes cannot use CSS variables; these read on light and dark backgrounds.
export const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#65a30d"];

/** The colour of a metric by its name: the same on every page and every load. */
export function colorOfName(name) {
  let hash = 0;
  for (const ch of String(name)) hash = (hash * 31 + ch.codePointAt(0)) >>> 0;
  return COLORS[hash % COLORS.length];
}

/** The colour of the `index`-th run of a comparison. */
export function colorOfRun(index) {
  return COLORS[index % COLORS.length];
}
