// A paged listing page: the pager's state goes to the API, which filters, sorts and pages
// (so a page of 2,000 queues costs the broker one bounded listing, never all of them).

import * as api from '../api.js';
import { h, replace } from '../dom.js';
import { pager, pagingQuery, pagingState, table } from '../widgets.js';

// url(): the API path to list; columns: as for widgets.table.
export function pagedListing({ url, columns, empty, id, vhostScoped = true }) {
  const state = pagingState();
  const results = h('div', { id });
  let latest = 0;
  const refresh = async () => {
    const mine = ++latest;
    const result = await api.get(url(), pagingQuery(state));
    if (mine !== latest) return; // a newer request (another page, a filter) answered first
    controls.update(result);
    replace(results, table(columns, result.items, { empty, id: `${id}-table` }));
  };
  const controls = pager(state, () => refresh().catch((error) => {
    replace(results, h('p', { class: 'error' }, error.message));
  }));
  return { element: h('div', { class: 'listing' }, controls, results), refresh, state, vhostScoped };
}
