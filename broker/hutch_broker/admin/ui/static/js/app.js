// The page's frame: login, header and tabs, the router over location.hash, and the refresh loop.
//
// A page module exports mount(main, params, session) and returns { refresh }: the frame calls
// refresh() once and then every interval, never two at once, and drops it on navigation. Forms
// live outside what refresh() redraws, so typing is never lost to a refresh.

import * as api from './api.js';
import { h, replace, route } from './dom.js';
import * as overview from './pages/overview.js';
import * as connections from './pages/connections.js';
import * as exchanges from './pages/exchanges.js';
import * as queues from './pages/queues.js';
import * as admin from './pages/admin.js';

const REFRESH_KEY = 'hutch.refresh-seconds';
const REFRESH_CHOICES = [['1', 'every second'], ['5', 'every 5 seconds'],
  ['10', 'every 10 seconds'], ['30', 'every 30 seconds'], ['0', 'never']];

const TABS = [
  ['Overview', ''], ['Connections', 'connections'], ['Channels', 'channels'],
  ['Exchanges', 'exchanges'], ['Queues', 'queues'], ['Admin', 'admin'],
];

const root = document.getElementById('app');
const session = { user: null, overview: null, vhosts: [] };
let current = null; // { refresh, timer, busy, generation }
let generation = 0;

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  return raw === '' ? [] : raw.split('/').map((part) => decodeURIComponent(part));
}

function pageFor(segments) {
  const [tab, ...rest] = segments;
  switch (tab) {
    case undefined: return [overview.mount, {}];
    case 'connections': return [connections.mountConnections, {}];
    case 'channels': return [connections.mountChannels, {}];
    case 'exchanges':
      return rest.length === 2
        ? [exchanges.mountExchange, { vhost: rest[0], name: rest[1] }]
        : [exchanges.mountList, {}];
    case 'queues':
      return rest.length === 2
        ? [queues.mountQueue, { vhost: rest[0], name: rest[1] }]
        : [queues.mountList, {}];
    case 'admin': return [admin.mount, { section: rest[0] || 'users' }];
    default: return null;
  }
}

function refreshSeconds() {
  return Number(sessionStorage.getItem(REFRESH_KEY) ?? '5');
}

function showLogin(reason) {
  stopPage();
  session.user = null;
  const username = h('input', { id: 'username', name: 'username', autocomplete: 'username',
    required: true, autofocus: true });
  const password = h('input', { id: 'password', name: 'password', type: 'password',
    autocomplete: 'current-password' });
  const status = h('p', { id: 'login-status', class: reason ? 'error' : 'muted', role: 'status' },
    reason || '');
  // method="post" and no action: without the script, a submit would POST to this page (and be
  // refused), never put the password in a URL.
  const form = h('form', { id: 'login', method: 'post', class: 'login' },
    h('h1', {}, 'Hutch management'),
    h('label', { class: 'field' }, h('span', { class: 'label' }, 'Username'), username),
    h('label', { class: 'field' }, h('span', { class: 'label' }, 'Password'), password),
    h('button', { type: 'submit', id: 'login-submit' }, 'Log in'), status);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    replace(status, 'Logging in...');
    try {
      session.user = await api.login(username.value, password.value);
      password.value = '';
      await start();
    } catch (error) {
      status.className = 'error';
      replace(status, error.status === 401 ? `Login failed: ${error.message}` : error.message);
    }
  });
  replace(root, form);
  username.focus();
}

async function loadSession() {
  session.user = await api.get('api/whoami');
  session.overview = await api.get('api/overview');
  session.vhosts = (await api.get('api/vhosts')).map((vhost) => vhost.name);
}

async function start() {
  await loadSession();
  window.addEventListener('hashchange', navigate);
  navigate();
}

function header(tab) {
  const tags = session.user.tags;
  const refresh = h('select', { id: 'refresh', title: 'Refresh' },
    REFRESH_CHOICES.map(([value, label]) =>
      h('option', { value, selected: Number(value) === refreshSeconds() }, label)));
  refresh.addEventListener('change', () => {
    sessionStorage.setItem(REFRESH_KEY, refresh.value);
    navigate();
  });
  const logout = h('button', { type: 'button', id: 'logout' }, 'Log out');
  logout.addEventListener('click', () => {
    api.logout();
    window.removeEventListener('hashchange', navigate);
    showLogin('');
  });
  const cluster = session.overview ? session.overview.cluster_name : '';
  return h('header', { class: 'top' },
    h('div', { class: 'brand' }, h('a', { href: '#/' }, 'Hutch'),
      h('span', { class: 'cluster', id: 'cluster-name' }, cluster)),
    h('nav', { class: 'tabs' }, TABS.map(([label, path]) =>
      h('a', { href: path ? route(path) : '#/', class: tab === path ? 'active' : null }, label))),
    h('div', { class: 'who' },
      h('span', { id: 'user' }, `User ${session.user.name}`),
      h('span', { class: 'muted' }, Array.isArray(tags) ? tags.join(', ') : String(tags)),
      h('label', {}, 'Refresh ', refresh), logout));
}

function stopPage() {
  if (current) clearTimeout(current.timer);
  current = null;
  generation += 1;
}

function navigate() {
  if (!session.user) return;
  stopPage();
  const segments = parseHash();
  const found = pageFor(segments);
  const main = h('main', { id: 'page' });
  const footer = h('footer', { id: 'refreshed', class: 'muted' });
  replace(root, header(segments[0] || ''), main, footer);
  if (!found) {
    replace(main, h('p', { class: 'error' }, 'No such page.'));
    return;
  }
  const [mount, params] = found;
  const page = mount(main, params, session) || {};
  const mine = generation;
  current = { refresh: page.refresh, timer: null };
  const tick = async () => {
    if (mine !== generation || !current.refresh) return;
    try {
      await current.refresh();
      replace(footer, `Refreshed ${new Date().toLocaleTimeString('en-GB')}`);
    } catch (error) {
      replace(footer, h('span', { class: 'error' }, `Refresh failed: ${error.message}`));
    }
    const seconds = refreshSeconds();
    if (mine === generation && seconds > 0) current.timer = setTimeout(tick, seconds * 1000);
  };
  tick();
}

api.setUnauthorizedHandler((reason) => {
  window.removeEventListener('hashchange', navigate);
  showLogin(reason);
});

if (api.loggedIn()) {
  start().catch((error) => showLogin(error.message));
} else {
  showLogin('');
}
