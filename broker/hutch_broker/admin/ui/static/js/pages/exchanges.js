// Exchanges: the list with paging, adding one, and an exchange's page with its bindings,
// publishing a message, and deleting it.

import * as api from '../api.js';
import { h, link, rate, replace, route } from '../dom.js';
import {
  checkbox, dangerButton, facts, field, form, keyValues, section, select, textInput,
  typedArguments,
} from '../widgets.js';
import { bindingsTable, features, policyNames, vhostChooser, vhostField } from './common.js';
import { pagedListing } from './listing.js';

const EXCHANGE_ARGUMENTS = [['Alternate exchange', 'alternate-exchange', 'string']];
const PROPERTY_HELPERS = [
  ['Content type', 'content_type', 'string'], ['Correlation id', 'correlation_id', 'string'],
  ['Expiration', 'expiration', 'string'], ['Message id', 'message_id', 'string'],
  ['Priority', 'priority', 'number'], ['Reply to', 'reply_to', 'string'],
  ['Type', 'type', 'string'], ['User id', 'user_id', 'string'],
];

function urlName(name) {
  return name === '' ? 'amq.default' : name;
}

function addExchangeForm(session, onDone) {
  const args = typedArguments('exchange-arguments', EXCHANGE_ARGUMENTS);
  return form('add-exchange', [
    vhostField(session, 'exchange-vhost'),
    field('Name', textInput('exchange-name', { required: true })),
    field('Type', select('exchange-type', ['direct', 'fanout', 'headers', 'topic'], 'direct')),
    field('Durable', checkbox('exchange-durable', true)),
    field('Auto delete', checkbox('exchange-auto-delete')),
    field('Internal', checkbox('exchange-internal')),
    field('Arguments', args),
  ], 'Add exchange', async (element) => {
    const value = (name) => element.querySelector(`#${name}`);
    await api.put(api.path('exchanges', value('exchange-vhost').value, value('exchange-name').value), {
      type: value('exchange-type').value,
      durable: value('exchange-durable').checked,
      auto_delete: value('exchange-auto-delete').checked,
      internal: value('exchange-internal').checked,
      arguments: args.value(),
    });
    onDone();
    return 'Exchange added.';
  });
}

export function mountList(main, params, session) {
  let vhost = '';
  const listing = pagedListing({
    id: 'exchanges',
    url: () => (vhost ? api.path('exchanges', vhost) : 'api/exchanges'),
    empty: 'No exchanges.',
    columns: [
      { title: 'Virtual host', cell: (row) => row.vhost },
      { title: 'Name', cell: (row) => link(row.name || '(AMQP default)', 'exchanges', row.vhost,
        urlName(row.name)) },
      { title: 'Type', cell: (row) => row.type },
      { title: 'Features', cell: features },
      { title: 'Policy', cell: policyNames },
      { title: 'In', cell: (row) => rate(row.message_stats?.publish_in_details), numeric: true },
      { title: 'Out', cell: (row) => rate(row.message_stats?.publish_out_details), numeric: true },
    ],
  });
  const chooser = vhostChooser(session, () => {
    vhost = chooser.value;
    listing.state.page = 1;
    listing.refresh();
  });
  replace(main, h('h1', {}, 'Exchanges'),
    section('All exchanges', h('label', {}, 'Virtual host: ', chooser), listing.element),
    section('Add a new exchange', addExchangeForm(session, listing.refresh)));
  return { refresh: listing.refresh };
}

function publishForm(vhost, name) {
  const headers = typedArguments('publish-headers');
  const properties = typedArguments('publish-properties', PROPERTY_HELPERS);
  return form('publish', [
    field('Routing key', textInput('publish-routing-key')),
    field('Delivery mode', select('publish-delivery-mode',
      [['1', '1 - Non-persistent'], ['2', '2 - Persistent']], '1')),
    field('Headers', headers),
    field('Properties', properties),
    field('Payload', h('textarea', { id: 'publish-payload', rows: 4 })),
  ], 'Publish message', async (element) => {
    const props = properties.value();
    props.delivery_mode = Number(element.querySelector('#publish-delivery-mode').value);
    const extra = headers.value();
    if (Object.keys(extra).length) props.headers = extra;
    const result = await api.post(api.path('exchanges', vhost, urlName(name), 'publish'), {
      properties: props,
      routing_key: element.querySelector('#publish-routing-key').value,
      payload: element.querySelector('#publish-payload').value,
      payload_encoding: 'string',
    });
    return result.routed ? 'Message published.' : 'Message published, but not routed.';
  });
}

function bindForm(vhost, name, onDone) {
  const args = typedArguments('bind-arguments');
  return form('bind', [
    field('To', select('bind-kind', [['q', 'Queue'], ['e', 'Exchange']], 'q')),
    field('Name', textInput('bind-destination', { required: true })),
    field('Routing key', textInput('bind-routing-key')),
    field('Arguments', args),
  ], 'Bind', async (element) => {
    const kind = element.querySelector('#bind-kind').value;
    const destination = element.querySelector('#bind-destination').value;
    await api.post(api.path('bindings', vhost, 'e', name, kind, destination), {
      routing_key: element.querySelector('#bind-routing-key').value,
      arguments: args.value(),
    });
    onDone();
    return 'Bound.';
  });
}

export function mountExchange(main, params) {
  const { vhost } = params;
  const name = params.name === 'amq.default' ? '' : params.name;
  const details = h('div', { id: 'exchange-details' });
  const sources = h('div', { id: 'exchange-bindings' });
  const destinations = h('div');
  const refresh = async () => {
    const exchange = await api.get(api.path('exchanges', vhost, urlName(name)));
    const [outgoing, incoming] = await Promise.all([
      api.get(api.path('exchanges', vhost, urlName(name), 'bindings', 'source')),
      api.get(api.path('exchanges', vhost, urlName(name), 'bindings', 'destination')),
    ]);
    replace(details, facts([
      ['Virtual host', exchange.vhost],
      ['Type', exchange.type],
      ['Features', features(exchange)],
      ['Policy', exchange.policy || ''],
      ['Arguments', keyValues(exchange.arguments)],
      ['Publish in', rate(exchange.message_stats?.publish_in_details)],
      ['Publish out', rate(exchange.message_stats?.publish_out_details)],
    ]));
    replace(sources, bindingsTable(outgoing, { id: 'source-bindings', onDone: refresh,
      showSource: false }));
    replace(destinations, bindingsTable(incoming, { id: 'destination-bindings', onDone: refresh,
      showDestination: false }));
  };
  const builtIn = name === '' || name.startsWith('amq.');
  replace(main,
    h('p', { class: 'crumbs' }, h('a', { href: route('exchanges') }, 'Exchanges'), ' / ', vhost),
    h('h1', { id: 'exchange-name' }, name || '(AMQP default)'),
    section('Details', details),
    section('Bindings from this exchange', sources, name === '' ? null : bindForm(vhost, name, refresh)),
    section('Bindings to this exchange', destinations),
    section('Publish message', publishForm(vhost, name)),
    builtIn ? null : section('Delete this exchange', dangerButton('Delete', async () => {
      await api.del(api.path('exchanges', vhost, name));
      location.hash = route('exchanges');
      return 'Deleted.';
    }, { id: 'delete-exchange' })));
  return { refresh };
}
