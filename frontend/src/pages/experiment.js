// The experiment page. Its body (state, best trial, trials, parameter plots) is an htmx
// fragment that asks for itself every 2 s until the experiment ends (experiment_body.html);
// this script draws every trial's metric over its budget from the API's curves/ (again when
// a trial changes, and every few seconds while trials run), keeps the actions (pause,
// resume, cancel) in step with the state, and says whether the page is live.

import htmx from "htmx.org";

import { Charts } from "../lib/charts.js";
import { getJSON } from "../lib/http.js";
import { showLiveStatus } from "../lib/socket.js";
import "./base.js";
import { setupDialogs } from "./job/actions.js";

// Running trials report between state changes: their curves are fetched at least this often.
const CURVES_EVERY_MS = 6000;
const BODY = "experiment-body";
const ACTIONS = "experiment-actions";

class ExperimentPage {
  constructor(root) {
    this.curvesUrl = root.dataset.curvesUrl;
    this.status = document.getElementById("live-status");
    // The chart's card is kept across the body's swaps (hx-preserve), so it is drawn once.
    this.chartsEl = document.getElementById("charts");
    this.charts = new Charts(this.chartsEl, document.getElementById("charts-empty"), {
      xName: root.dataset.budget,
    });
    this.signature = null; // the trials as last drawn (experiment_body.html's data-signature)
    this.lastCurves = 0;
    this.loading = false;
  }

  start() {
    setupDialogs();
    document.body.addEventListener("htmx:afterSwap", (event) => this.swapped(event.detail?.target));
    for (const name of ["htmx:sendError", "htmx:responseError", "htmx:timeout"]) {
      document.body.addEventListener(name, (event) => {
        if (event.detail?.elt?.id === BODY) showLiveStatus(this.status, false);
      });
    }
    this.bodyChanged();
  }

  swapped(target) {
    if (target?.id === BODY) this.bodyChanged();
    if (target?.id !== ACTIONS) return;
    // After a pause, resume or cancel: show its effect at once, and focus the outcome
    // (the button or dialog it came from may be gone).
    const actions = document.getElementById(ACTIONS);
    const body = document.getElementById(BODY);
    if (body && actions && body.dataset.state !== actions.dataset.state) htmx.trigger(body, "refresh");
    const outcome = actions?.querySelector(".notice, .form-errors");
    if (outcome) {
      outcome.tabIndex = -1;
      outcome.focus();
    }
  }

  bodyChanged() {
    const body = document.getElementById(BODY);
    if (!body) return;
    const ended = body.dataset.ended === "true";
    // The experiment changed state on its own (it ended, or someone else paused it).
    const actions = document.getElementById(ACTIONS);
    if (actions && actions.dataset.state !== body.dataset.state) htmx.trigger(actions, "refresh");
    const changed = body.dataset.signature !== this.signature;
    this.signature = body.dataset.signature;
    if (changed || ended || Date.now() - this.lastCurves >= CURVES_EVERY_MS) this.loadCurves();
    if (ended) {
      this.status.textContent = "ended: the page no longer updates";
      this.status.classList.remove("live", "disconnected");
    } else {
      showLiveStatus(this.status, true);
    }
  }

  async loadCurves() {
    if (this.loading) return;
    this.loading = true;
    this.lastCurves = Date.now();
    try {
      const body = await getJSON(this.curvesUrl);
      // A trial keeps its colour: colours follow trial numbers, not arrival order.
      this.charts.orderKeys(body.trials.map((t) => String(t.number)));
      const drawn = body.trials.filter((t) => t.points.length > 0);
      for (const trial of drawn) {
        const points = trial.points.map(([step, value]) => ({ step, value }));
        this.charts.setSeries(body.metric, points, { key: String(trial.number), label: `trial ${trial.number}` });
      }
      this.chartsEl.dataset.trials = String(drawn.length);
    } catch (err) {
      console.warn("curves:", err);
    } finally {
      this.loading = false;
    }
  }
}

const root = document.getElementById("experiment");
if (root) new ExperimentPage(root).start();
