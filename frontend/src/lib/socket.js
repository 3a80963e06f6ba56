// A WebSocket that reconnects by itself (1 s doubling to 10 s, with jitter) and says so:
// every live part of a page shows "live" or "reconnecting…" through `onStatus`.

import { nextBackoff, parseMessage, wsUrl } from "./series.js";

export class LiveSocket {
  /**
   * @param {string} path  the feed's path on this host, e.g. `/ws/jobs/7/`
   * @param {{onMessage: (msg: object) => void, onStatus?: (live: boolean) => void,
   *          onReconnect?: () => void, parse?: (text: string) => object | null}} handlers
   *          `onReconnect` runs after every reconnect (not the first connect): refetch what
   *          may have been missed while away. `parse` reads a message (null: dropped); a
   *          page that reads more of the feed than `parseMessage` brings its own.
   */
  constructor(path, { onMessage, onStatus = () => {}, onReconnect = () => {}, parse = parseMessage }) {
    this.path = path;
    this.parse = parse;
    this.onMessage = onMessage;
    this.onStatus = onStatus;
    this.onReconnect = onReconnect;
    this.backoff = 0;
    this.connectedOnce = false;
    this.closed = false;
  }

  connect() {
    if (this.closed) return;
    const socket = new WebSocket(wsUrl(location, this.path));
    this.socket = socket;
    socket.addEventListener("open", () => {
      this.backoff = 0;
      this.onStatus(true);
      if (this.connectedOnce) this.onReconnect();
      this.connectedOnce = true;
    });
    socket.addEventListener("message", (event) => {
      const msg = this.parse(event.data);
      if (msg !== null) this.onMessage(msg);
    });
    socket.addEventListener("close", () => {
      if (this.closed) return;
      this.backoff = nextBackoff(this.backoff);
      this.onStatus(false);
      // Jitter spreads the reconnects of many open pages after a server restart.
      setTimeout(() => this.connect(), this.backoff * (0.8 + Math.random() * 0.4));
    });
    return this;
  }

  close() {
    this.closed = true;
    this.socket?.close();
  }
}

/** Show a feed's state in a status element (`live` / `reconnecting…`). */
export function showLiveStatus(el, live) {
  if (!el) return;
  el.textContent = live ? "live" : "disconnected — reconnecting…";
  el.classList.toggle("live", live);
  el.classList.toggle("disconnected", !live);
}
