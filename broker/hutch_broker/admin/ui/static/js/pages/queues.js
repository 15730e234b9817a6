// Queues: the list (filters and paging for thousands of queues), adding one, and a queue's
// page: effective policy and limits, consumers, bindings, get messages, purge, delete.

import * as api from '../api.js';
import { bytes, h, link, number, rate, replace, route } from '../dom.js';
import {
  actionButton, checkbox, dangerButton, facts, field, form, keyValues, section, select,
  table, textInput, typedArguments,
} from '../widgets.js';
import { bindingsTable, count, features, policyNames, vhostChooser, vhostField } from './common.js';
import { pagedListing } from './listing.js';

const QUEUE_ARGUMENTS = [
  ['Auto expire', 'x-expires', 'number'], ['Message TTL', 'x-message-ttl', 'number'],
  ['Overflow behaviour', 'x-overflow', 'string'], ['Single active consumer', 'x-single-active-consumer', 'boolean'],
  ['Dead letter exchange', 'x-dead-letter-exchange', 'string'],
  ['Dead letter routing key', 'x-dead-letter-routing-key', 'string'],
  ['Max length', 'x-max-length', 'number'], ['Max length bytes', 'x-max-length-bytes', 'number'],
  ['Maximum priority', 'x-max-priority', 'number'], ['Lazy mode', 'x-queue-mode', 'string'],
  ['Delivery limit', 'x-delivery-limit', 'number'],
];
// The keys a policy or an argument can limit a queue by, shown side by side on its page.
const LIMIT_KEYS = ['max-length', 'max-length-bytes', 'overflow', 'message-ttl', 'expires',
  'delivery-limit', 'dead-letter-exchange', 'dead-letter-routing-key', 'queue-mode'];

function addQueueForm(session, onDone) {
  const args = typedArguments('queue-arguments', QUEUE_ARGUMENTS);
  return form('add-queue', [
    vhostField(session, 'queue-vhost'),
    field('Type', select('queue-type', ['classic', 'quorum', 'stream'], 'classic')),
    field('Name', textInput('queue-name', { required: true })),
    field('Durable', checkbox('queue-durable', true)),
    field('Auto delete', checkbox('queue-auto-delete')),
    field('Arguments', args),
  ], 'Add queue', async (element) => {
    const value = (name) => element.querySelector(`#${name}`);
    const body = { durable: value('queue-durable').checked,
      auto_delete: value('queue-auto-delete').checked, arguments: args.value() };
    if (value('queue-type').value !== 'classic') body.arguments['x-queue-type'] = value('queue-type').value;
    await api.put(api.path('queues', value('queue-vhost').value, value('queue-name').value), body);
    onDone();
    return 'Queue added.';
  });
}

export function mountList(main, params, session) {
  let vhost = '';
  const listing = pagedListing({
    id: 'queues',
    url: () => (vhost ? api.path('queues', vhost) : 'api/queues'),
    empty: 'No queues.',
    columns: [
      { title: 'Virtual host', cell: (row) => row.vhost },
      { title: 'Name', cell: (row) => link(row.name, 'queues', row.vhost, row.name) },
      { title: 'Type', cell: (row) => row.type },
      { title: 'Features', cell: features },
      { title: 'Policy', cell: policyNames },
      { title: 'State', cell: (row) => row.state },
      { title: 'Ready', cell: (row) => count(row.messages_ready), numeric: true },
      { title: 'Unacked', cell: (row) => count(row.messages_unacknowledged), numeric: true },
      { title: 'Total', cell: (row) => count(row.messages), numeric: true },
      { title: 'Incoming', cell: (row) => rate(row.message_stats?.publish_details), numeric: true },
      { title: 'Deliver / get', cell: (row) => rate(row.message_stats?.deliver_get_details),
        numeric: true },
    ],
  });
  const chooser = vhostChooser(session, () => {
    vhost = chooser.value;
    listing.state.page = 1;
    listing.refresh();
  });
  replace(main, h('h1', {}, 'Queues'),
    section('All queues', h('label', {}, 'Virtual host: ', chooser), listing.element),
    section('Add a new queue', addQueueForm(session, listing.refresh)));
  return { refresh: listing.refresh };
}

function limits(queue) {
  const policy = queue.effective_policy_definition || {};
  const args = queue.arguments || {};
  const rows = LIMIT_KEYS.filter((key) => key in policy || `x-${key}` in args).map((key) => ({
    key, argument: args[`x-${key}`], policy: policy[key],
  }));
  return table([
    { title: 'Limit', cell: (row) => row.key },
    { title: 'Queue argument', cell: (row) => (row.argument === undefined ? '' : String(row.argument)) },
    { title: 'Effective policy', cell: (row) => (row.policy === undefined ? '' : String(row.policy)) },
  ], rows, { empty: 'No limits from arguments or policies.', id: 'queue-limits' });
}

function consumers(queue) {
  return table([
    { title: 'Channel', cell: (row) => row.channel_details?.name || '' },
    { title: 'Consumer tag', cell: (row) => row.consumer_tag },
    { title: 'Ack required', cell: (row) => (row.ack_required ? 'yes' : 'no') },
    { title: 'Exclusive', cell: (row) => (row.exclusive ? 'yes' : 'no') },
    { title: 'Prefetch', cell: (row) => number(row.prefetch_count), numeric: true },
    { title: 'Active', cell: (row) => (row.active === false ? 'no' : 'yes') },
    { title: 'Arguments', cell: (row) => (Object.keys(row.arguments || {}).length
      ? JSON.stringify(row.arguments) : '') },
  ], queue.consumer_details || [], { empty: 'No consumers.', id: 'consumers' });
}

function message(item, index) {
  return h('div', { class: 'message' },
    h('h3', {}, `Message ${index + 1}`),
    facts([
      ['Exchange', item.exchange || '(AMQP default)'],
      ['Routing key', item.routing_key],
      ['Redelivered', item.redelivered ? 'yes' : 'no'],
      ['Properties', keyValues(item.properties)],
      ['Payload', `${number(item.payload_bytes)} bytes, encoding ${item.payload_encoding}`],
    ]),
    h('pre', { class: 'payload' }, item.payload));
}

function getForm(vhost, name) {
  const output = h('div', { id: 'messages' });
  return h('div', {}, form('get-messages', [
    field('Ack mode', select('get-ackmode', [
      ['ack_requeue_true', 'Nack message requeue true'],
      ['ack_requeue_false', 'Automatic ack'],
      ['reject_requeue_true', 'Reject requeue true'],
      ['reject_requeue_false', 'Reject requeue false'],
    ], 'ack_requeue_true')),
    field('Encoding', select('get-encoding', [['auto', 'Auto string / base64'],
      ['base64', 'base64']], 'auto')),
    field('Messages', textInput('get-count', { value: '1', type: 'number' })),
  ], 'Get messages', async (element) => {
    const items = await api.post(api.path('queues', vhost, name, 'get'), {
      count: Number(element.querySelector('#get-count').value),
      ackmode: element.querySelector('#get-ackmode').value,
      encoding: element.querySelector('#get-encoding').value,
    });
    replace(output, items.length ? items.map(message) : h('p', { class: 'muted' }, 'Queue is empty.'));
    return `${items.length} message(s).`;
  }), output);
}

function bindForm(vhost, name, onDone) {
  const args = typedArguments('bind-arguments');
  return form('bind', [
    field('From exchange', textInput('bind-source', { required: true })),
    field('Routing key', textInput('bind-routing-key')),
    field('Arguments', args),
  ], 'Bind', async (element) => {
    await api.post(api.path('bindings', vhost, 'e', element.querySelector('#bind-source').value,
      'q', name), {
      routing_key: element.querySelector('#bind-routing-key').value,
      arguments: args.value(),
    });
    onDone();
    return 'Bound.';
  });
}

export function mountQueue(main, params) {
  const { vhost, name } = params;
  const details = h('div', { id: 'queue-details' });
  const limitsBox = h('div');
  const consumersBox = h('div');
  const bindingsBox = h('div');
  const refresh = async () => {
    const [queue, bindings] = await Promise.all([
      api.get(api.path('queues', vhost, name)),
      api.get(api.path('queues', vhost, name, 'bindings')),
    ]);
    replace(details, h('div', { class: 'columns' },
      facts([
        ['Virtual host', queue.vhost],
        ['Type', queue.type],
        ['Features', features(queue)],
        ['State', queue.state],
        ['Policy', queue.policy || '', 'queue-policy'],
        ['Operator policy', queue.operator_policy || '', 'queue-operator-policy'],
        ['Effective policy definition', keyValues(queue.effective_policy_definition)],
        ['Consumers', number(queue.consumers)],
      ]),
      facts([
        ['Ready', count(queue.messages_ready), 'messages-ready'],
        ['Unacked', count(queue.messages_unacknowledged), 'messages-unacked'],
        ['Total', count(queue.messages), 'messages-total'],
        ['Message body bytes', bytes(queue.message_bytes ?? 0)],
        ['Incoming', rate(queue.message_stats?.publish_details)],
        ['Deliver / get', rate(queue.message_stats?.deliver_get_details)],
        ['Arguments', keyValues(queue.arguments)],
      ])));
    replace(limitsBox, limits(queue));
    replace(consumersBox, consumers(queue));
    replace(bindingsBox, bindingsTable(bindings, { id: 'queue-bindings', onDone: refresh,
      showDestination: false }));
  };
  replace(main,
    h('p', { class: 'crumbs' }, h('a', { href: route('queues') }, 'Queues'), ' / ', vhost),
    h('h1', { id: 'queue-name' }, name),
    section('Overview', details),
    section('Limits', limitsBox),
    section('Consumers', consumersBox),
    section('Bindings', bindingsBox, bindForm(vhost, name, refresh)),
    section('Get messages', getForm(vhost, name)),
    section('Purge', actionButton('Purge messages', async () => {
      await api.del(api.path('queues', vhost, name, 'contents'));
      await refresh();
      return 'Queue purged.';
    }, { id: 'purge' })),
    section('Delete', dangerButton('Delete queue', async () => {
      await api.del(api.path('queues', vhost, name));
      location.hash = route('queues');
      return 'Deleted.';
    }, { id: 'delete-queue' })));
  return { refresh };
}
