// The what-if page: a replay swapped in place (htmx); a refused form comes back with its
// errors beside the fields, and the focus moves to the first error or to the result.

import { swapRefusals } from "../lib/actions.js";
import "./base.js";

swapRefusals();
