// Tabs over the page's panels (WAI-ARIA tabs, automatic activation): arrows, Home and End
// move between tabs; the URL's hash names the open one, so a link can open the Logs tab.
// Without JavaScript the tablist stays hidden and every panel shows, one after another.

const tabName = (tab) => tab.id.replace(/^tab-/, "");

/**
 * @param {HTMLElement} tablist  the `[role=tablist]` element (rendered `hidden`)
 * @param {(name: string) => void} onShow  called with the tab's name when it opens
 */
export function setupTabs(tablist, onShow = () => {}) {
  if (!tablist) return null;
  const tabs = [...tablist.querySelectorAll('[role="tab"]')];
  const panelOf = (tab) => document.getElementById(tab.getAttribute("aria-controls"));

  function select(tab, { focus = false, remember = true } = {}) {
    for (const other of tabs) {
      const selected = other === tab;
      other.setAttribute("aria-selected", String(selected));
      other.tabIndex = selected ? 0 : -1;
      const panel = panelOf(other);
      if (panel) panel.hidden = !selected;
    }
    if (focus) tab.focus();
    if (remember) history.replaceState(null, "", `#${tabName(tab)}`);
    onShow(tabName(tab));
  }

  tablist.addEventListener("click", (event) => {
    const tab = event.target.closest('[role="tab"]');
    if (tab) select(tab);
  });
  tablist.addEventListener("keydown", (event) => {
    const at = tabs.indexOf(document.activeElement);
    if (at < 0) return;
    const next = {
      ArrowRight: (at + 1) % tabs.length,
      ArrowLeft: (at - 1 + tabs.length) % tabs.length,
      Home: 0,
      End: tabs.length - 1,
    }[event.key];
    if (next === undefined) return;
    event.preventDefault();
    select(tabs[next], { focus: true });
  });

  const fromHash = () => tabs.find((t) => `#${tabName(t)}` === location.hash);
  window.addEventListener("hashchange", () => {
    const tab = fromHash();
    if (tab) select(tab, { remember: false });
  });
  tablist.hidden = false;
  select(fromHash() ?? tabs[0], { remember: false });
  return { select: (name) => select(tabs.find((t) => tabName(t) === name) ?? tabs[0]) };
}
