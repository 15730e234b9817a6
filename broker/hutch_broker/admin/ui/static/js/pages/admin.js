// Admin: Users (and their permissions), Virtual Hosts, Policies (user and operator), Limits,
// Parameters. The API decides who may do what; these pages only show what the tags allow.

import * as api from '../api.js';
import { h, json, number, replace, route } from '../dom.js';
import {
  dangerButton, field, form, section, select, table, textInput, typedArguments,
} from '../widgets.js';
import { vhostField } from './common.js';

const SECTIONS = [['users', 'Users'], ['vhosts', 'Virtual Hosts'], ['policies', 'Policies'],
  ['limits', 'Limits'], ['parameters', 'Parameters']];

// The definition keys of RabbitMQ 3.10's "Add / update a policy" form, grouped as it groups
// them, and of its operator policy form.
const POLICY_KEYS = {
  'Queues [All types]': [['Max length', 'max-length', 'number'],
    ['Max length bytes', 'max-length-bytes', 'number'], ['Overflow behaviour', 'overflow', 'string'],
    ['Auto expire', 'expires', 'number'], ['Dead letter exchange', 'dead-letter-exchange', 'string'],
    ['Dead letter routing key', 'dead-letter-routing-key', 'string']],
  'Queues [Classic]': [['Message TTL', 'message-ttl', 'number'], ['HA mode', 'ha-mode', 'string'],
    ['HA params', 'ha-params', 'number'], ['HA sync mode', 'ha-sync-mode', 'string'],
    ['HA mirror promotion on shutdown', 'ha-promote-on-shutdown', 'string'],
    ['HA mirror promotion on failure', 'ha-promote-on-failure', 'string'],
    ['Lazy mode', 'queue-mode', 'string'], ['Version', 'queue-version', 'number'],
    ['Master locator', 'queue-master-locator', 'string']],
  'Queues [Quorum]': [['Delivery limit', 'delivery-limit', 'number'],
    ['Dead letter strategy', 'dead-letter-strategy', 'string'],
    ['Leader locator', 'queue-leader-locator', 'string']],
  'Queues [Stream]': [['Max age', 'max-age', 'string'],
    ['Max segment size in bytes', 'stream-max-segment-size-bytes', 'number']],
  Exchanges: [['Alternate exchange', 'alternate-exchange', 'string']],
  Federation: [['Federation upstream set', 'federation-upstream-set', 'string'],
    ['Federation upstream', 'federation-upstream', 'string']],
};
const OPERATOR_POLICY_KEYS = [['Max length', 'max-length', 'number'],
  ['Max length bytes', 'max-length-bytes', 'number'], ['Overflow behaviour', 'overflow', 'string'],
  ['Message TTL', 'message-ttl', 'number'], ['Auto expire', 'expires', 'number'],
  ['Delivery limit', 'delivery-limit', 'number']];
const TAG_CHOICES = ['administrator', 'monitoring', 'policymaker', 'management', 'impersonator'];

function tagsOf(user) {
  return Array.isArray(user.tags) ? user.tags : String(user.tags || '').split(',').filter(Boolean);
}

// -- users -----------------------------------------------------------------------------------

function usersSection(session, box) {
  const tags = textInput('user-tags', { placeholder: 'administrator, policymaker' });
  const addForm = form('add-user', [
    field('Username', textInput('user-name', { required: true })),
    field('Password', h('input', { id: 'user-password', type: 'password', autocomplete: 'new-password' }),
      'Leave empty for a user that cannot log in with a password.'),
    field('Tags', h('div', {}, tags, ' ', TAG_CHOICES.map((tag) => {
      const button = h('button', { type: 'button', class: 'link' }, tag);
      button.addEventListener('click', () => {
        const current = tags.value.split(',').map((t) => t.trim()).filter(Boolean);
        if (!current.includes(tag)) current.push(tag);
        tags.value = current.join(', ');
      });
      return [button, ' '];
    }))),
  ], 'Add / update user', async (element) => {
    const password = element.querySelector('#user-password').value;
    const body = { tags: tags.value };
    if (password) body.password = password;
    else body.password_hash = '';
    await api.put(api.path('users', element.querySelector('#user-name').value), body);
    element.querySelector('#user-password').value = '';
    await box.refresh();
    return 'User saved.';
  });
  const permissionForm = form('set-permission', [
    field('User', textInput('permission-user', { required: true })),
    vhostField(session, 'permission-vhost'),
    field('Configure regexp', textInput('permission-configure', { value: '.*' })),
    field('Write regexp', textInput('permission-write', { value: '.*' })),
    field('Read regexp', textInput('permission-read', { value: '.*' })),
  ], 'Set permission', async (element) => {
    const value = (name) => element.querySelector(`#${name}`).value;
    await api.put(api.path('permissions', value('permission-vhost'), value('permission-user')), {
      configure: value('permission-configure'), write: value('permission-write'),
      read: value('permission-read'),
    });
    await box.refresh();
    return 'Permission set.';
  });
  return [section('Add / update a user', addForm), section('Set permission', permissionForm)];
}

async function refreshUsers(live) {
  const [users, permissions] = await Promise.all([api.get('api/users'), api.get('api/permissions')]);
  replace(live,
    section('All users', table([
      { title: 'Name', cell: (user) => user.name },
      { title: 'Tags', cell: (user) => tagsOf(user).join(', ') },
      { title: 'Can access virtual hosts', cell: (user) => permissions
        .filter((p) => p.user === user.name).map((p) => p.vhost).join(', ') || 'No access' },
      { title: 'Has password', cell: (user) => (user.password_hash ? '•' : '') },
      { title: '', cell: (user) => dangerButton('Delete', async () => {
        await api.del(api.path('users', user.name));
        await refreshUsers(live);
        return 'Deleted.';
      }) },
    ], users, { id: 'users' })),
    section('Permissions', table([
      { title: 'User', cell: (p) => p.user }, { title: 'Virtual host', cell: (p) => p.vhost },
      { title: 'Configure', cell: (p) => p.configure }, { title: 'Write', cell: (p) => p.write },
      { title: 'Read', cell: (p) => p.read },
      { title: '', cell: (p) => dangerButton('Clear', async () => {
        await api.del(api.path('permissions', p.vhost, p.user));
        await refreshUsers(live);
        return 'Cleared.';
      }) },
    ], permissions, { id: 'permissions' })));
}

// -- virtual hosts ---------------------------------------------------------------------------

function vhostsSection(session, box) {
  return [section('Add a new virtual host', form('add-vhost', [
    field('Name', textInput('vhost-name', { required: true })),
    field('Description', textInput('vhost-description')),
    field('Tags', textInput('vhost-tags')),
    field('Default queue type', select('vhost-queue-type', ['classic', 'quorum', 'stream'],
      'classic')),
  ], 'Add virtual host', async (element) => {
    const value = (name) => element.querySelector(`#${name}`).value;
    await api.put(api.path('vhosts', value('vhost-name')), {
      description: value('vhost-description'), tags: value('vhost-tags'),
      default_queue_type: value('vhost-queue-type'),
    });
    session.vhosts = (await api.get('api/vhosts')).map((vhost) => vhost.name);
    await box.refresh();
    return 'Virtual host added.';
  }))];
}

async function refreshVhosts(live, session) {
  const vhosts = await api.get('api/vhosts');
  session.vhosts = vhosts.map((vhost) => vhost.name);
  replace(live, section('All virtual hosts', table([
    { title: 'Name', cell: (v) => v.name },
    { title: 'Description', cell: (v) => v.description || '' },
    { title: 'Tags', cell: (v) => (Array.isArray(v.tags) ? v.tags.join(', ') : v.tags || '') },
    { title: 'Ready', cell: (v) => number(v.messages_ready ?? 0), numeric: true },
    { title: 'Unacked', cell: (v) => number(v.messages_unacknowledged ?? 0), numeric: true },
    { title: 'Total', cell: (v) => number(v.messages ?? 0), numeric: true },
    { title: '', cell: (v) => dangerButton('Delete', async () => {
      await api.del(api.path('vhosts', v.name));
      await refreshVhosts(live, session);
      return 'Deleted.';
    }) },
  ], vhosts, { id: 'vhosts' })));
}

// -- policies --------------------------------------------------------------------------------

function policyForm(session, box, { operator }) {
  const prefix = operator ? 'operator-policy' : 'policy';
  const helpers = operator ? OPERATOR_POLICY_KEYS : Object.values(POLICY_KEYS).flat();
  const definition = typedArguments(`${prefix}-definition`, helpers);
  const applyTo = operator ? [['queues', 'Queues']]
    : [['all', 'Exchanges and queues'], ['exchanges', 'Exchanges'], ['queues', 'Queues']];
  return form(`${prefix}-form`, [
    vhostField(session, `${prefix}-vhost`),
    field('Name', textInput(`${prefix}-name`, { required: true })),
    field('Pattern', textInput(`${prefix}-pattern`, { required: true, placeholder: '^amq.' })),
    field('Apply to', select(`${prefix}-apply-to`, applyTo, operator ? 'queues' : 'all')),
    field('Priority', textInput(`${prefix}-priority`, { type: 'number' })),
    field('Definition', definition),
  ], operator ? 'Add / update operator policy' : 'Add / update policy', async (element) => {
    const value = (name) => element.querySelector(`#${prefix}-${name}`).value;
    const body = { pattern: value('pattern'), 'apply-to': value('apply-to'),
      definition: definition.value() };
    if (value('priority') !== '') body.priority = Number(value('priority'));
    await api.put(api.path(operator ? 'operator-policies' : 'policies', value('vhost'),
      value('name')), body);
    await box.refresh();
    return operator ? 'Operator policy saved.' : 'Policy saved.';
  });
}

function policyTable(policies, { operator, id, onDone }) {
  return table([
    { title: 'Virtual host', cell: (p) => p.vhost },
    { title: 'Name', cell: (p) => p.name },
    { title: 'Pattern', cell: (p) => p.pattern },
    { title: 'Apply to', cell: (p) => p['apply-to'] },
    { title: 'Definition', cell: (p) => h('code', {}, JSON.stringify(p.definition)) },
    { title: 'Priority', cell: (p) => String(p.priority), numeric: true },
    { title: '', cell: (p) => dangerButton('Delete', async () => {
      await api.del(api.path(operator ? 'operator-policies' : 'policies', p.vhost, p.name));
      await onDone();
      return 'Deleted.';
    }) },
  ], policies, { id, empty: operator ? 'No operator policies.' : 'No policies.' });
}

async function refreshPolicies(live, session) {
  const isPolicymaker = ['administrator', 'policymaker'].some((t) => session.user.tags.includes(t));
  const [policies, operatorPolicies] = await Promise.all([
    api.get('api/policies'),
    isPolicymaker ? api.get('api/operator-policies').catch(() => []) : [],
  ]);
  const again = () => refreshPolicies(live, session);
  replace(live,
    section('User policies', policyTable(policies, { operator: false, id: 'policies', onDone: again })),
    section('Operator policies', policyTable(operatorPolicies,
      { operator: true, id: 'operator-policies', onDone: again })));
}

function policiesSection(session, box) {
  return [section('Add / update a policy', policyForm(session, box, { operator: false })),
    section('Add / update an operator policy', policyForm(session, box, { operator: true }))];
}

// -- limits ----------------------------------------------------------------------------------

function limitsSection(session, box) {
  const vhostLimit = form('set-vhost-limit', [
    vhostField(session, 'vhost-limit-vhost'),
    field('Limit', select('vhost-limit-name', ['max-connections', 'max-queues'], 'max-connections')),
    field('Value', textInput('vhost-limit-value', { type: 'number', required: true })),
  ], 'Set / update a virtual host limit', async (element) => {
    const value = (name) => element.querySelector(`#${name}`).value;
    await api.put(api.path('vhost-limits', value('vhost-limit-vhost'), value('vhost-limit-name')),
      { value: Number(value('vhost-limit-value')) });
    await box.refresh();
    return 'Limit set.';
  });
  const userLimit = form('set-user-limit', [
    field('User', textInput('user-limit-user', { required: true })),
    field('Limit', select('user-limit-name', ['max-connections', 'max-channels'], 'max-connections')),
    field('Value', textInput('user-limit-value', { type: 'number', required: true })),
  ], 'Set / update a user limit', async (element) => {
    const value = (name) => element.querySelector(`#${name}`).value;
    await api.put(api.path('user-limits', value('user-limit-user'), value('user-limit-name')),
      { value: Number(value('user-limit-value')) });
    await box.refresh();
    return 'Limit set.';
  });
  return [section('Set a virtual host limit', vhostLimit), section('Set a user limit', userLimit)];
}

function limitRows(items, owner) {
  return items.flatMap((item) => Object.entries(item.value || {}).map(([name, value]) => ({
    owner: item[owner], name, value,
  })));
}

async function refreshLimits(live) {
  const [vhostLimits, userLimits] = await Promise.all([
    api.get('api/vhost-limits'), api.get('api/user-limits')]);
  const again = () => refreshLimits(live);
  const limitTable = (rows, kind, ownerTitle, id) => table([
    { title: ownerTitle, cell: (row) => row.owner },
    { title: 'Limit', cell: (row) => row.name },
    { title: 'Value', cell: (row) => String(row.value), numeric: true },
    { title: '', cell: (row) => dangerButton('Clear', async () => {
      await api.del(api.path(kind, row.owner, row.name));
      await again();
      return 'Cleared.';
    }) },
  ], rows, { id, empty: 'No limits.' });
  replace(live,
    section('Virtual host limits', limitTable(limitRows(vhostLimits, 'vhost'), 'vhost-limits',
      'Virtual host', 'vhost-limits')),
    section('User limits', limitTable(limitRows(userLimits, 'user'), 'user-limits', 'User',
      'user-limits')));
}

// -- parameters ------------------------------------------------------------------------------

function parseValue(text) {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(`Value is not JSON: ${error.message}`);
  }
}

function parametersSection(session, box) {
  const parameter = form('set-parameter', [
    field('Component', textInput('parameter-component', { required: true,
      placeholder: 'federation-upstream' })),
    vhostField(session, 'parameter-vhost'),
    field('Name', textInput('parameter-name', { required: true })),
    field('Value (JSON)', h('textarea', { id: 'parameter-value', rows: 3 })),
  ], 'Set parameter', async (element) => {
    const value = (name) => element.querySelector(`#${name}`).value;
    const body = { component: value('parameter-component'), vhost: value('parameter-vhost'),
      name: value('parameter-name'), value: parseValue(value('parameter-value')) };
    await api.put(api.path('parameters', body.component, body.vhost, body.name), body);
    await box.refresh();
    return 'Parameter set.';
  });
  const global = form('set-global-parameter', [
    field('Name', textInput('global-parameter-name', { required: true })),
    field('Value (JSON)', h('textarea', { id: 'global-parameter-value', rows: 3 })),
  ], 'Set global parameter', async (element) => {
    const name = element.querySelector('#global-parameter-name').value;
    await api.put(api.path('global-parameters', name), { name,
      value: parseValue(element.querySelector('#global-parameter-value').value) });
    await box.refresh();
    return 'Global parameter set.';
  });
  return [section('Set a parameter', parameter), section('Set a global parameter', global)];
}

async function refreshParameters(live, session) {
  const isAdmin = session.user.tags.includes('administrator');
  const [parameters, globals] = await Promise.all([
    api.get('api/parameters'),
    isAdmin ? api.get('api/global-parameters') : [],
  ]);
  const again = () => refreshParameters(live, session);
  replace(live,
    section('Parameters', table([
      { title: 'Component', cell: (p) => p.component },
      { title: 'Virtual host', cell: (p) => p.vhost },
      { title: 'Name', cell: (p) => p.name },
      { title: 'Value', cell: (p) => h('code', {}, JSON.stringify(p.value)) },
      { title: '', cell: (p) => dangerButton('Clear', async () => {
        await api.del(api.path('parameters', p.component, p.vhost, p.name));
        await again();
        return 'Cleared.';
      }) },
    ], parameters, { id: 'parameters', empty: 'No parameters.' })),
    isAdmin ? section('Global parameters', table([
      { title: 'Name', cell: (p) => p.name },
      { title: 'Value', cell: (p) => h('pre', { class: 'payload' }, json(p.value)) },
      { title: '', cell: (p) => dangerButton('Clear', async () => {
        await api.del(api.path('global-parameters', p.name));
        await again();
        return 'Cleared.';
      }) },
    ], globals, { id: 'global-parameters', empty: 'No global parameters.' })) : null);
}

// -- the page --------------------------------------------------------------------------------

const PAGES = {
  users: [usersSection, refreshUsers],
  vhosts: [vhostsSection, refreshVhosts],
  policies: [policiesSection, refreshPolicies],
  limits: [limitsSection, refreshLimits],
  parameters: [parametersSection, refreshParameters],
};

export function mount(main, params, session) {
  const chosen = PAGES[params.section] ? params.section : 'users';
  const [forms, refreshLive] = PAGES[chosen];
  const live = h('div', { id: `admin-${chosen}` });
  const box = { refresh: () => refreshLive(live, session) };
  const title = SECTIONS.find(([key]) => key === chosen)[1];
  replace(main,
    h('nav', { class: 'subtabs' }, SECTIONS.map(([key, label]) =>
      h('a', { href: route('admin', key), class: key === chosen ? 'active' : null }, label))),
    h('h1', {}, title), live, forms(session, box));
  return box;
}

