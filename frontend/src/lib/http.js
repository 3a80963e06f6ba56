// Same-origin JSON fetches for the page scripts.

/** GET a JSON resource of the API with the page's session; throws on a non-2xx answer. */
export async function getJSON(url) {
  const response = await fetch(url, {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}
