// Overview: totals, message rates over time, the node's memory against its watermark, alarms,
// listeners; definitions export and import for administrators.

import * as api from '../api.js';
import { bytes, duration, h, number, rate, replace } from '../dom.js';
import { actionButton, facts, form, meter, section, sparkline, table } from '../widgets.js';

const HISTORY = 60; // samples kept for the charts (one per refresh)
const history = { publish: [], deliver: [], messages: [] };

function remember(name, value) {
  const samples = history[name];
  samples.push(typeof value === 'number' ? value : 0);
  if (samples.length > HISTORY) samples.shift();
}

function totals(data) {
  const objects = data.object_totals || {};
  const queued = data.queue_totals || {};
  return section('Totals', facts([
    ['Connections', number(objects.connections), 'total-connections'],
    ['Channels', number(objects.channels), 'total-channels'],
    ['Exchanges', number(objects.exchanges), 'total-exchanges'],
    ['Queues', number(objects.queues), 'total-queues'],
    ['Consumers', number(objects.consumers), 'total-consumers'],
    ['Messages ready', number(queued.messages_ready), 'total-ready'],
    ['Messages unacknowledged', number(queued.messages_unacknowledged), 'total-unacked'],
    ['Messages', number(queued.messages), 'total-messages'],
  ]));
}

function rates(data) {
  const stats = data.message_stats || {};
  remember('publish', stats.publish_details && stats.publish_details.rate);
  remember('deliver', stats.deliver_get_details && stats.deliver_get_details.rate);
  remember('messages', data.queue_totals && data.queue_totals.messages);
  return section('Message rates',
    h('div', { class: 'charts' },
      h('figure', {}, sparkline(history.publish, { id: 'chart-publish' }),
        h('figcaption', {}, `Publish ${rate(stats.publish_details)}`)),
      h('figure', {}, sparkline(history.deliver, { id: 'chart-deliver' }),
        h('figcaption', {}, `Deliver / get ${rate(stats.deliver_get_details)}`)),
      h('figure', {}, sparkline(history.messages, { id: 'chart-messages' }),
        h('figcaption', {}, `Queued messages ${number(data.queue_totals?.messages ?? 0)}`))),
    h('p', { class: 'muted' }, `The last ${HISTORY} refreshes of this tab.`));
}

function node(nodes) {
  const item = nodes[0];
  if (!item) return section('Node', h('p', { class: 'muted' }, 'No node information.'));
  const alarms = [];
  if (item.mem_alarm) alarms.push('memory');
  if (item.disk_free_alarm) alarms.push('disk');
  return section('Node',
    facts([
      ['Name', item.name],
      ['Uptime', duration(item.uptime)],
      ['Memory', h('div', {}, meter(item.mem_used, item.mem_limit, 'memory-meter'),
        `${bytes(item.mem_used)} of ${bytes(item.mem_limit)} high watermark`)],
      ['File descriptors', `${number(item.fd_used)} of ${number(item.fd_total)}`],
      ['Alarms', h('span', { id: 'alarms', class: alarms.length ? 'error' : 'ok' },
        alarms.length ? `${alarms.join(', ')} alarm in effect` : 'None')],
    ]));
}

function listeners(data) {
  return section('Listeners', table([
    { title: 'Protocol', cell: (row) => row.protocol },
    { title: 'Interface', cell: (row) => row.ip_address },
    { title: 'Port', cell: (row) => String(row.port), numeric: true },
  ], data.listeners || []));
}

function download(name, text) {
  const url = URL.createObjectURL(new Blob([text], { type: 'application/json' }));
  const anchor = h('a', { href: url, download: name });
  document.body.append(anchor);
  anchor.click();
  anchor.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function definitions(session) {
  const file = h('input', { type: 'file', id: 'definitions-file', accept: '.json,application/json' });
  return section('Definitions',
    h('p', {}, 'Users, vhosts, permissions, policies, parameters, exchanges, queues and bindings '
      + 'as one JSON file, in the format RabbitMQ uses.'),
    actionButton('Download broker definitions', async () => {
      const data = await api.get('api/definitions');
      download(`${session.overview?.cluster_name || 'hutch'}-definitions.json`,
        JSON.stringify(data, null, 2));
      return 'Downloaded.';
    }, { id: 'definitions-export' }),
    form('definitions-import', [h('label', { class: 'field' },
      h('span', { class: 'label' }, 'Definitions file'), file)], 'Upload definitions', async () => {
      if (!file.files.length) throw new Error('Choose a file first.');
      const text = await file.files[0].text();
      try {
        JSON.parse(text);
      } catch (error) {
        throw new Error(`Not JSON: ${error.message}`);
      }
      await api.post('api/definitions', text);
      return 'Definitions imported.';
    }));
}

export function mount(main, params, session) {
  const live = h('div', { id: 'overview' });
  const isAdmin = session.user.tags.includes('administrator');
  replace(main, h('h1', {}, 'Overview'), live, isAdmin ? definitions(session) : null);
  return {
    async refresh() {
      const [data, nodes] = await Promise.all([
        api.get('api/overview'),
        api.get('api/nodes').catch(() => []),
      ]);
      replace(live, h('div', { class: 'columns' }, totals(data), node(nodes)), rates(data),
        listeners(data));
    },
  };
}
