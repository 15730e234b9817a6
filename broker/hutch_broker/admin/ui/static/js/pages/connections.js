// Connections and Channels: who is connected, from where, and how fast.

import * as api from '../api.js';
import { h, number, rate, replace } from '../dom.js';
import { dangerButton, section } from '../widgets.js';
import { pagedListing } from './listing.js';

function closeButton(row) {
  return dangerButton('Close', async () => {
    await api.del(api.path('connections', row.name),
      { 'X-Reason': 'Closed via the management UI' });
    return 'Closed.';
  });
}

export function mountConnections(main, params, session) {
  const isAdmin = session.user.tags.includes('administrator');
  const listing = pagedListing({
    id: 'connections',
    url: () => 'api/connections',
    empty: 'No connections.',
    columns: [
      { title: 'Name', cell: (row) => row.name },
      { title: 'Virtual host', cell: (row) => row.vhost },
      { title: 'User', cell: (row) => row.user },
      { title: 'Client', cell: (row) => {
        const client = row.client_properties || {};
        return [client.product, client.version].filter(Boolean).join(' ');
      } },
      { title: 'State', cell: (row) => row.state },
      { title: 'TLS', cell: (row) => (row.ssl ? 'yes' : 'no') },
      { title: 'Channels', cell: (row) => number(row.channels), numeric: true },
      { title: 'From client', cell: (row) => rate(row.recv_oct_details), numeric: true },
      { title: 'To client', cell: (row) => rate(row.send_oct_details), numeric: true },
      isAdmin ? { title: '', cell: closeButton } : null,
    ].filter(Boolean),
  });
  replace(main, h('h1', {}, 'Connections'), section('All connections', listing.element));
  return { refresh: listing.refresh };
}

export function mountChannels(main) {
  const listing = pagedListing({
    id: 'channels',
    url: () => 'api/channels',
    empty: 'No channels.',
    columns: [
      { title: 'Channel', cell: (row) => row.name },
      { title: 'Virtual host', cell: (row) => row.vhost },
      { title: 'User', cell: (row) => row.user },
      { title: 'Mode', cell: (row) => [row.confirm ? 'confirm' : '',
        row.transactional ? 'transactional' : ''].filter(Boolean).join(', ') },
      { title: 'State', cell: (row) => row.state },
      { title: 'Prefetch', cell: (row) => number(row.prefetch_count), numeric: true },
      { title: 'Unacked', cell: (row) => number(row.messages_unacknowledged), numeric: true },
      { title: 'Consumers', cell: (row) => number(row.consumer_count), numeric: true },
      { title: 'Publish', cell: (row) => rate(row.message_stats?.publish_details), numeric: true },
    ],
  });
  replace(main, h('h1', {}, 'Channels'), section('All channels', listing.element));
  return { refresh: listing.refresh };
}
