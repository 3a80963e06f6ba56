// The account page: tokens created and revoked in place (htmx), a dialog to confirm a
// revocation, copy buttons for the new secret and the CLI commands.

import { enableCopyButtons, enableDialogs, swapRefusals } from "../lib/actions.js";
import "./base.js";

enableDialogs();
enableCopyButtons();
swapRefusals();
