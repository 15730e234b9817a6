// The pieces every page is made of: tables, forms, a pager, typed key/value rows, messages.
// All built with dom.h, so whatever they show is text.

import { append, h, replace, svg } from './dom.js';

export function section(title, ...content) {
  return h('section', { class: 'box' }, h('h2', {}, title), ...content);
}

// columns: [{ title, cell: (row) => node | string, numeric }]
export function table(columns, rows, { empty = 'Nothing to show.', id } = {}) {
  if (!rows || rows.length === 0) return h('p', { class: 'empty', id }, empty);
  const head = h('tr', {}, columns.map((column) => h('th', {}, column.title)));
  const body = rows.map((row) =>
    h('tr', {}, columns.map((column) =>
      h('td', { class: column.numeric ? 'num' : null }, column.cell(row)))),
  );
  return h('table', { class: 'list', id }, h('thead', {}, head), h('tbody', {}, body));
}

// A table of one object's keys and values (arguments, policy definitions).
export function keyValues(object, { empty = 'None' } = {}) {
  const entries = Object.entries(object || {});
  if (entries.length === 0) return h('span', { class: 'muted' }, empty);
  return h('table', { class: 'facts' },
    entries.map(([key, value]) => h('tr', {}, h('th', {}, key),
      h('td', {}, typeof value === 'string' ? value : JSON.stringify(value)))));
}

export function facts(pairs) {
  return h('table', { class: 'facts' },
    pairs.filter(Boolean).map(([label, value, id]) =>
      h('tr', {}, h('th', {}, label), h('td', { id }, value))));
}

export function field(label, input, hint) {
  return h('label', { class: 'field' }, h('span', { class: 'label' }, label), input,
    hint ? h('span', { class: 'hint' }, hint) : null);
}

export function textInput(name, { value = '', type = 'text', required = false, placeholder } = {}) {
  return h('input', { name, id: name, type, value, required, placeholder, autocomplete: 'off' });
}

export function select(name, options, selected) {
  return h('select', { name, id: name },
    options.map((option) => {
      const [value, label] = Array.isArray(option) ? option : [option, option];
      return h('option', { value, selected: value === selected }, label);
    }));
}

export function checkbox(name, checked = false) {
  return h('input', { type: 'checkbox', name, id: name, checked });
}

// A form whose submit runs an async action and reports its outcome beside the button.
export function form(id, fields, submitLabel, action) {
  const status = h('span', { class: 'status', role: 'status' });
  const element = h('form', { id, class: 'form', autocomplete: 'off' }, fields,
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, submitLabel), status));
  element.addEventListener('submit', async (event) => {
    event.preventDefault();
    await run(status, () => action(element));
  });
  return element;
}

export async function run(status, action) {
  replace(status, 'Working...');
  status.className = 'status';
  try {
    const message = await action();
    replace(status, message || 'Done.');
    status.className = 'status ok';
  } catch (error) {
    replace(status, error.message || String(error));
    status.className = 'status error';
  }
}

// A button that asks once more before acting (no native dialogs: they block the page).
export function dangerButton(label, action, { id } = {}) {
  const status = h('span', { class: 'status' });
  let armed = false;
  const button = h('button', { type: 'button', class: 'danger', id }, label);
  button.addEventListener('click', async () => {
    if (!armed) {
      armed = true;
      replace(button, `Really ${label.toLowerCase()}?`);
      setTimeout(() => {
        armed = false;
        replace(button, label);
      }, 5000);
      return;
    }
    armed = false;
    replace(button, label);
    await run(status, action);
  });
  return h('span', { class: 'danger-action' }, button, status);
}

export function actionButton(label, action, { id } = {}) {
  const status = h('span', { class: 'status' });
  const button = h('button', { type: 'button', id }, label);
  button.addEventListener('click', () => run(status, action));
  return h('span', {}, button, status);
}

// -- paging ----------------------------------------------------------------------------------

export const PAGE_SIZES = [20, 50, 100, 500];

// Paging state for one listing; the API does the filtering and paging (bounded listings).
export function pagingState() {
  return { page: 1, pageSize: 100, name: '', regex: false };
}

export function pagingQuery(state) {
  return {
    page: state.page,
    page_size: state.pageSize,
    name: state.name,
    use_regex: state.regex ? 'true' : 'false',
    pagination: 'true',
  };
}

export function pager(state, onChange) {
  const info = h('span', { id: 'page-info', class: 'page-info' });
  const filter = h('input', {
    id: 'filter', type: 'search', placeholder: 'Filter by name', value: state.name,
  });
  const regex = checkbox('filter-regex', state.regex);
  const size = select('page-size', PAGE_SIZES.map((n) => [String(n), String(n)]),
    String(state.pageSize));
  const previous = h('button', { type: 'button', id: 'page-prev' }, '< Previous');
  const next = h('button', { type: 'button', id: 'page-next' }, 'Next >');
  let timer = null;
  filter.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      state.name = filter.value;
      state.page = 1;
      onChange();
    }, 300);
  });
  regex.addEventListener('change', () => {
    state.regex = regex.checked;
    state.page = 1;
    onChange();
  });
  size.addEventListener('change', () => {
    state.pageSize = Number(size.value);
    state.page = 1;
    onChange();
  });
  previous.addEventListener('click', () => {
    if (state.page > 1) {
      state.page -= 1;
      onChange();
    }
  });
  next.addEventListener('click', () => {
    if (state.page < (state.pageCount || 1)) {
      state.page += 1;
      onChange();
    }
  });
  const element = h('div', { class: 'pager' },
    h('label', {}, 'Filter: ', filter), h('label', {}, regex, ' Regex'),
    h('label', {}, 'Page size: ', size), previous, info, next);
  element.update = (result) => {
    state.pageCount = Math.max(result.page_count || 1, 1);
    if (state.page > state.pageCount) state.page = state.pageCount;
    previous.disabled = state.page <= 1;
    next.disabled = state.page >= state.pageCount;
    const filtered = result.filtered_count !== result.total_count
      ? ` (filtered from ${result.total_count.toLocaleString('en')})` : '';
    replace(info, `Page ${result.page} of ${state.pageCount}, `
      + `${result.filtered_count.toLocaleString('en')} items${filtered}`);
  };
  return element;
}

// -- typed arguments (policy definitions, x-arguments, headers) ------------------------------

const TYPES = [['string', 'String'], ['number', 'Number'], ['boolean', 'Boolean'], ['list', 'List']];

function convert(raw, type, key) {
  if (type === 'number') {
    const value = Number(raw);
    if (raw.trim() === '' || !Number.isFinite(value)) throw new Error(`${key}: not a number`);
    return value;
  }
  if (type === 'boolean') {
    if (raw !== 'true' && raw !== 'false') throw new Error(`${key}: true or false`);
    return raw === 'true';
  }
  if (type === 'list') return raw.split(',').map((item) => item.trim()).filter(Boolean);
  return raw;
}

// Rows of key = value (type); a blank row is always last. helpers: [[label, key, type]].
export function typedArguments(name, helpers = []) {
  const rows = h('div', { class: 'typed-rows', id: name });
  function addRow(key = '', type = 'string') {
    const keyInput = h('input', { class: 'arg-key', value: key, placeholder: 'key' });
    const valueInput = h('input', { class: 'arg-value', placeholder: 'value' });
    const typeSelect = select('', TYPES, type);
    typeSelect.removeAttribute('id');
    typeSelect.className = 'arg-type';
    const row = h('div', { class: 'typed-row' }, keyInput, ' = ', valueInput, ' ', typeSelect);
    keyInput.addEventListener('input', () => {
      if (row === rows.lastElementChild && keyInput.value) addRow();
    });
    rows.append(row);
    return row;
  }
  addRow();
  const links = helpers.length === 0 ? null : h('div', { class: 'helpers' }, 'Add ',
    helpers.map(([label, key, type]) => {
      const button = h('button', { type: 'button', class: 'link', 'data-key': key }, label);
      button.addEventListener('click', () => {
        const last = rows.lastElementChild;
        const blank = last.querySelector('.arg-key').value === '';
        const row = blank ? last : addRow();
        row.querySelector('.arg-key').value = key;
        row.querySelector('.arg-type').value = type;
        addRow();
        row.querySelector('.arg-value').focus();
      });
      return [button, ' '];
    }));
  const element = h('div', { class: 'typed' }, rows, links);
  element.value = () => {
    const result = {};
    for (const row of rows.children) {
      const key = row.querySelector('.arg-key').value.trim();
      if (!key) continue;
      const raw = row.querySelector('.arg-value').value;
      result[key] = convert(raw, row.querySelector('.arg-type').value, key);
    }
    return result;
  };
  return element;
}

// -- messages and charts ---------------------------------------------------------------------

export function errorLine(error) {
  return h('p', { class: 'error' }, error.message || String(error));
}

// A small line chart of recent samples (numbers), newest last.
export function sparkline(samples, { width = 240, height = 40, id } = {}) {
  const top = Math.max(1, ...samples);
  const step = samples.length > 1 ? width / (samples.length - 1) : width;
  const points = samples.map((value, index) =>
    `${(index * step).toFixed(1)},${(height - (value / top) * (height - 2) - 1).toFixed(1)}`);
  return svg('svg', { class: 'sparkline', id: id || '', width, height,
    viewBox: `0 0 ${width} ${height}` },
  svg('polyline', { points: points.join(' '), fill: 'none' }));
}

export function meter(used, limit, id) {
  const fill = h('div', { class: 'meter-fill' });
  const fraction = limit > 0 ? Math.min(used / limit, 1) : 0;
  fill.style.width = `${(fraction * 100).toFixed(1)}%`;
  if (fraction >= 1) fill.classList.add('alarm');
  return append(h('div', { class: 'meter', id }), fill);
}
