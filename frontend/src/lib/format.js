// Formatting shared by the pages: relative times ("3 min ago") beside absolute ones.

const UNITS = [
  ["year", 365 * 86400],
  ["month", 30 * 86400],
  ["day", 86400],
  ["hour", 3600],
  ["minute", 60],
  ["second", 1],
];
const RELATIVE = new Intl.RelativeTimeFormat("en", { numeric: "auto" });

/** "5 minutes ago" / "in 2 hours" for a time, measured from `now` (both Date or ms). */
export function relativeTime(time, now = Date.now()) {
  const seconds = Math.round((Number(time) - Number(now)) / 1000);
  if (Math.abs(seconds) < 5) return "just now";
  for (const [unit, size] of UNITS) {
    if (Math.abs(seconds) >= size || unit === "second") {
      return RELATIVE.format(Math.trunc(seconds / size), unit);
    }
  }
  return "";
}

/** Fill every `<time data-relative datetime=…>` with its relative form; the absolute time
 * stays in its title, so hovering (or a screen reader) gives both. */
export function refreshRelativeTimes(root, now = Date.now()) {
  for (const el of root.querySelectorAll("time[data-relative]")) {
    const when = Date.parse(el.getAttribute("datetime") ?? "");
    if (Number.isNaN(when)) continue;
    if (!el.title) el.title = el.textContent.trim();
    el.textContent = relativeTime(when, now);
  }
}
