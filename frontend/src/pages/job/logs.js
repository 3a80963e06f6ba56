// The Logs tab: opens at the tail, follows new lines, filters by task and searches.

import { getJSON } from "../../lib/http.js";
import { LOG_LINE_CAP, dropOverlap, formatLogLine, logLineClass } from "../../lib/series.js";
import { LOG_TAIL, fetchLogTail, logMatches } from "./logic.js";

const SEARCH_DELAY_MS = 300;

/** A capped `<pre>` of log lines that follows the end while `follow` says so. */
export class LogView {
  constructor(el, follow = null) {
    this.el = el;
    this.follow = follow; // a checkbox; null: follow when scrolled to the end
    el?.addEventListener("scroll", () => {
      // Scrolling up stops following; scrolling back to the end resumes it.
      if (this.follow && this.el.clientHeight > 0) this.follow.checked = this.atEnd();
    });
    this.follow?.addEventListener("change", () => this.follow.checked && this.scrollToEnd());
  }

  atEnd() {
    return this.el.scrollHeight - this.el.scrollTop - this.el.clientHeight < 8;
  }

  following() {
    return this.follow ? this.follow.checked : this.atEnd();
  }

  clear() {
    this.el?.replaceChildren();
  }

  get count() {
    return this.el ? this.el.childElementCount : 0;
  }

  append(lines) {
    if (!this.el || lines.length === 0) return;
    const follow = this.following();
    const fragment = document.createDocumentFragment();
    for (const l of lines.slice(-LOG_LINE_CAP)) {
      const span = document.createElement("span");
      span.className = logLineClass(l);
      span.textContent = `${formatLogLine(l)}\n`;
      fragment.append(span);
    }
    this.el.append(fragment);
    let excess = this.el.childElementCount - LOG_LINE_CAP;
    while (excess > 0 && this.el.firstElementChild) {
      this.el.firstElementChild.remove();
      excess -= 1;
    }
    if (follow) this.scrollToEnd();
  }

  scrollToEnd() {
    if (this.el) this.el.scrollTop = this.el.scrollHeight;
  }
}

/**
 * A log view fed by a tail fetch and the live feed, for one filter at a time.
 *
 * The feed is open before the tail is fetched, so nothing falls in between: live lines
 * that come during the fetch wait in a buffer and join after the overlap is dropped.
 */
export class LogFeed {
  constructor(view, url, { filter = {}, only = () => true, tail = LOG_TAIL, onLoaded = () => {} } = {}) {
    this.view = view;
    this.url = url;
    this.filter = filter;
    this.only = only; // a fixed filter on top (the checkpoint lines)
    this.tail = tail;
    this.onLoaded = onLoaded;
    this.generation = 0;
    this.buffer = [];
    this.shown = false;
  }

  keep(lines) {
    return lines.filter((l) => logMatches(l, this.filter) && this.only(l));
  }

  async load(filter = this.filter) {
    this.filter = filter;
    const generation = ++this.generation;
    this.shown = false;
    this.buffer = [];
    let history = [];
    try {
      history = this.keep(await fetchLogTail(getJSON, this.url, filter, { tail: this.tail }));
    } catch (err) {
      console.warn("logs:", err);
    }
    if (generation !== this.generation) return; // a newer filter took over
    this.view.clear();
    this.view.append(history.concat(dropOverlap(history, this.buffer)));
    this.buffer = [];
    this.shown = true;
    this.onLoaded(this.view.count);
  }

  live(lines) {
    const kept = this.keep(lines);
    if (kept.length === 0) return;
    if (this.shown) this.view.append(kept);
    else this.buffer.push(...kept);
  }
}

/** The Logs tab: the task select, the search box and the follow switch drive a LogFeed. */
export class LogPanel {
  constructor(url) {
    this.source = document.getElementById("log-source");
    this.search = document.getElementById("log-search");
    this.countEl = document.getElementById("log-count");
    this.view = new LogView(document.getElementById("logs"), document.getElementById("log-follow"));
    this.feed = new LogFeed(this.view, url, { onLoaded: (n) => this.showCount(n) });
    let timer = null;
    this.source?.addEventListener("change", () => this.reload());
    this.search?.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => this.reload(), SEARCH_DELAY_MS);
    });
    document.getElementById("log-filters")?.addEventListener("submit", (event) => {
      event.preventDefault();
      clearTimeout(timer);
      this.reload();
    });
  }

  filter() {
    return { source: this.source?.value ?? "", q: this.search?.value.trim() ?? "" };
  }

  reload() {
    return this.feed.load(this.filter());
  }

  live(lines) {
    this.feed.live(lines);
  }

  /** Offer a task that appeared after the page was rendered in the task select. */
  addSource(name) {
    if (!this.source || !name) return;
    if ([...this.source.options].some((o) => o.value === name)) return;
    this.source.add(new Option(name, name));
  }

  showCount(n) {
    if (!this.countEl) return;
    const { source, q } = this.filter();
    const what = [source && `from ${source}`, q && `containing “${q}”`].filter(Boolean).join(", ");
    this.countEl.textContent = n === 0 ? `No lines${what ? ` ${what}` : ""} yet.` : `The last ${n} lines${what ? ` ${what}` : ""}.`;
  }

  shown() {
    if (this.view.following()) this.view.scrollToEnd();
  }
}
