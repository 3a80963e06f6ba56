// The submit form's code archive: sent to `/jobs/new/code/` as soon as it is chosen (the
// service behind POST /api/v1/code/), with its progress; the digest it answers fills the
// spec's `code`, and the file input is emptied so that the form does not send it again.
// A refusal is shown beside the file input. Without this script the form sends the file.

/** A size in bytes as people read it: "812 B", "3.4 KiB", "12 MiB". */
export function formatSize(bytes) {
  if (!Number.isFinite(bytes) || bytes < 1024) return `${Math.max(0, Math.round(bytes || 0))} B`;
  const units = ["KiB", "MiB", "GiB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

/** What an upload's answer means: `{digest, size}` when kept, else `{error}`. */
export function uploadOutcome(status, body) {
  if (status === 201 && body && typeof body.digest === "string") {
    return { digest: body.digest, size: Number(body.size) || 0 };
  }
  if (body && typeof body.error === "string" && body.error) return { error: body.error };
  if (status === 413) return { error: "The archive is too large for the server." };
  return { error: `The upload failed (HTTP ${status}); choose the file again.` };
}

/** Wire the file input `input` of `form` (see the module comment). */
export function setupCodeUpload(form, input) {
  const code = form.elements.namedItem("code");
  const progress = document.getElementById("code-progress");
  const status = document.getElementById("code-upload-status");
  const error = document.getElementById(`${input.id}_error`);
  const help = `${input.id}_helptext`;

  function showError(message) {
    error.textContent = message;
    error.hidden = !message;
    if (message) {
      input.setAttribute("aria-invalid", "true");
      input.setAttribute("aria-describedby", `${help} ${error.id}`);
    } else {
      input.removeAttribute("aria-invalid");
      input.setAttribute("aria-describedby", help);
    }
  }

  function finish(file, outcome) {
    progress.hidden = true;
    // Kept or refused, the form should not send this file again.
    input.value = "";
    if (outcome.error) {
      status.textContent = "";
      showError(`${file.name}: ${outcome.error}`);
      return;
    }
    code.value = outcome.digest;
    status.textContent = `Uploaded ${file.name} (${formatSize(outcome.size)}).`;
    // The preview ("Would it start now?") follows the form's changes.
    code.dispatchEvent(new Event("change", { bubbles: true }));
  }

  function upload(file) {
    const body = new FormData();
    body.set("code_file", file);
    body.set("team", form.elements.namedItem("team")?.value ?? "");
    body.set("csrfmiddlewaretoken", form.elements.namedItem("csrfmiddlewaretoken").value);
    const request = new XMLHttpRequest();
    request.open("POST", form.dataset.codeUrl);
    request.setRequestHeader("Accept", "application/json");
    request.responseType = "json";
    request.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) progress.value = Math.round((100 * event.loaded) / event.total);
    });
    request.addEventListener("load", () => finish(file, uploadOutcome(request.status, request.response)));
    request.addEventListener("error", () =>
      finish(file, { error: "Could not reach the server to upload it; choose the file again." }),
    );
    showError("");
    progress.value = 0;
    progress.hidden = false;
    status.textContent = `Uploading ${file.name} (${formatSize(file.size)})…`;
    request.send(body);
  }

  input.addEventListener("change", (event) => {
    const file = input.files?.[0];
    if (!file) return;
    // The upload replaces the preview's own reaction to this change (it follows `code`).
    event.stopPropagation();
    upload(file);
  });
}
