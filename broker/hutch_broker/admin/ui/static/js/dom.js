// Building the page without ever turning a string into HTML.
//
// Every name, message body and reason the API returns reaches the page through h() or text(),
// which create elements and text nodes: a queue called <img src=x onerror=alert(1)> becomes
// exactly that text. Nothing here (or anywhere in the UI) assigns innerHTML, outerHTML or
// calls insertAdjacentHTML, document.write or eval; tests/ui/test_assets.py greps for them.
// Event handlers are functions only, and links only point inside the page (#...), so a value
// from the API can never become a handler or a javascript: URL.

const BOOLEAN_PROPERTIES = new Set(['checked', 'selected', 'disabled', 'multiple', 'required']);

export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  setAttributes(element, attrs);
  append(element, children);
  return element;
}

export function svg(tag, attrs, ...children) {
  const element = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key.startsWith('on')) throw new TypeError(`no handlers on <${tag}>`);
    element.setAttribute(key, String(value));
  }
  append(element, children);
  return element;
}

function setAttributes(element, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) {
      if (typeof value !== 'function') throw new TypeError(`${key} must be a function`);
      element.addEventListener(key.slice(2), value);
    } else if (key === 'value') {
      element.value = String(value);
    } else if (BOOLEAN_PROPERTIES.has(key)) {
      element[key] = Boolean(value);
    } else if (key === 'href') {
      element.setAttribute('href', inPageHref(value));
    } else if (key === 'style') {
      throw new TypeError('set styles through element.style (the CSP refuses style attributes)');
    } else {
      element.setAttribute(key, value === true ? '' : String(value));
    }
  }
}

function inPageHref(value) {
  const href = String(value);
  if (href.startsWith('#') || href.startsWith('blob:')) return href;
  throw new TypeError(`links stay in the page: ${href}`);
}

export function append(element, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function replace(element, ...children) {
  element.replaceChildren();
  return append(element, children);
}

// A link to a page of the UI: route('queues', vhost, name) -> #/queues/%2F/name
export function route(...segments) {
  return '#/' + segments.map((segment) => encodeURIComponent(segment)).join('/');
}

export function link(label, ...segments) {
  return h('a', { href: route(...segments) }, label);
}

// -- formatting ------------------------------------------------------------------------------

export function number(value) {
  if (value === undefined || value === null || value === '') return '';
  return typeof value === 'number' ? value.toLocaleString('en') : String(value);
}

export function rate(details) {
  const value = details && typeof details.rate === 'number' ? details.rate : 0;
  return `${value.toFixed(value < 10 ? 1 : 0)}/s`;
}

export function bytes(value) {
  if (typeof value !== 'number') return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let scaled = value;
  let unit = 0;
  while (scaled >= 1024 && unit < units.length - 1) {
    scaled /= 1024;
    unit += 1;
  }
  return `${scaled.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

export function json(value) {
  return JSON.stringify(value, null, 1);
}

export function duration(ms) {
  if (typeof ms !== 'number') return '';
  const seconds = Math.floor(ms / 1000);
  const days = Math.floor(seconds / 86400);
  const hours = Math.floor((seconds % 86400) / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  if (days) return `${days}d ${hours}h`;
  if (hours) return `${hours}h ${minutes}m`;
  return `${minutes}m ${seconds % 60}s`;
}
