// The teams pages: members added, re-roled and removed in place (htmx), with a dialog to
// confirm a removal; the quota form of platform admins.

import { enableDialogs, swapRefusals } from "../lib/actions.js";
import "./base.js";

enableDialogs();
swapRefusals();
