// The dashboard: its body is refreshed every ~4 s while the page is visible.
// Polling rather than a WebSocket: no cluster-wide feed exists (the live feeds are per
// job), and the fragment is cheap (a fixed number of queries whatever the cluster's size).

import "./base.js";

import { pollFragment } from "../lib/poll.js";

pollFragment("#dashboard-body", document.getElementById("live-status"));
