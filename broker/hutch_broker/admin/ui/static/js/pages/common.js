// Pieces shared by the object pages: the vhost chooser, features, arguments, bindings.

import * as api from '../api.js';
import { h, link, number } from '../dom.js';
import { dangerButton, field, select, table } from '../widgets.js';

export function vhostChooser(session, onChange, { all = true, id = 'vhost' } = {}) {
  const options = all ? [['', 'All virtual hosts'], ...session.vhosts] : session.vhosts;
  const chooser = select(id, options, all ? '' : session.vhosts[0]);
  if (onChange) chooser.addEventListener('change', onChange);
  return chooser;
}

export function vhostField(session, id) {
  return field('Virtual host', vhostChooser(session, null, { all: false, id }));
}

export function features(row) {
  const words = [];
  if (row.durable) words.push('D');
  if (row.auto_delete) words.push('AD');
  if (row.exclusive) words.push('Excl');
  if (row.internal) words.push('I');
  const args = Object.keys(row.arguments || {});
  if (args.length) words.push(`Args: ${args.join(', ')}`);
  return words.join(' ');
}

export function policyNames(row) {
  return [row.policy, row.operator_policy].filter(Boolean).join(' / ');
}

function destinationLink(binding) {
  return binding.destination_type === 'queue'
    ? link(binding.destination, 'queues', binding.vhost, binding.destination)
    : link(binding.destination, 'exchanges', binding.vhost, binding.destination || 'amq.default');
}

function unbind(binding, onDone) {
  if (binding.source === '') return h('span', { class: 'muted' }, '(default binding)');
  const kind = binding.destination_type === 'queue' ? 'q' : 'e';
  return dangerButton('Unbind', async () => {
    await api.del(api.path('bindings', binding.vhost, 'e', binding.source, kind,
      binding.destination, binding.properties_key));
    onDone();
    return 'Unbound.';
  });
}

export function bindingsTable(bindings, { id, onDone, showSource = true, showDestination = true }) {
  return table([
    showSource ? { title: 'From', cell: (b) => (b.source === ''
      ? '(default exchange)' : link(b.source, 'exchanges', b.vhost, b.source)) } : null,
    showDestination ? { title: 'To', cell: destinationLink } : null,
    { title: 'Routing key', cell: (b) => b.routing_key },
    { title: 'Arguments', cell: (b) => (Object.keys(b.arguments || {}).length
      ? JSON.stringify(b.arguments) : '') },
    { title: '', cell: (b) => unbind(b, onDone) },
  ].filter(Boolean), bindings, { empty: 'No bindings.', id });
}

export function count(value) {
  return number(value ?? 0);
}
