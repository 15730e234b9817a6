// The management API, as the page calls it.
//
// The login lives in this tab's sessionStorage as the value of an Authorization header: it is
// sent only by these calls, never in a URL, and it is gone when the tab closes or on Log out.
// No cookie exists, so a request another site makes the browser send carries no credentials
// (that is the UI's defence against cross-site request forgery); credentials: 'omit' also
// keeps the browser from attaching Basic credentials it may hold from a native prompt, and
// from showing that prompt on a 401.

const KEY = 'hutch.authorization';
// The reasons of a 401 that mean the login itself no longer works (a changed password, a
// deleted user), as opposed to one refused action ("Not administrator user").
const LOGIN_REFUSALS = new Set([
  'Not_Authorized',
  'Login failed',
  'Not management user',
  'User can only log in via localhost',
]);
let onUnauthorized = () => {};

export class ApiError extends Error {
  constructor(status, reason) {
    super(reason);
    this.status = status;
  }
}

export function setUnauthorizedHandler(handler) {
  onUnauthorized = handler;
}

export function loggedIn() {
  return sessionStorage.getItem(KEY) !== null;
}

export function logout() {
  sessionStorage.removeItem(KEY);
}

function basic(username, password) {
  const utf8 = new TextEncoder().encode(`${username}:${password}`);
  let binary = '';
  for (const byte of utf8) binary += String.fromCharCode(byte);
  return `Basic ${btoa(binary)}`;
}

// Checks the credentials with /api/whoami and keeps them only if they work.
export async function login(username, password) {
  const authorization = basic(username, password);
  const whoami = await send('GET', 'api/whoami', { authorization });
  sessionStorage.setItem(KEY, authorization);
  return whoami;
}

// path('queues', vhost, name) -> api/queues/%2F/name
export function path(...segments) {
  return 'api/' + segments.map((segment) => encodeURIComponent(segment)).join('/');
}

async function send(method, url, { authorization, query, body, headers } = {}) {
  const target = new URL(url, document.baseURI);
  for (const [key, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== '') target.searchParams.set(key, value);
  }
  const init = {
    method,
    credentials: 'omit',
    cache: 'no-store',
    headers: { Authorization: authorization, Accept: 'application/json', ...(headers || {}) },
  };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const response = await fetch(target, init);
  const text = await response.text();
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  if (!response.ok) {
    const reason = parsed && typeof parsed === 'object' ? parsed.reason || parsed.error : text;
    throw new ApiError(response.status, String(reason || response.statusText));
  }
  return parsed;
}

export async function request(method, url, options = {}) {
  const authorization = sessionStorage.getItem(KEY);
  if (authorization === null) {
    onUnauthorized('Please log in.');
    throw new ApiError(401, 'not logged in');
  }
  try {
    return await send(method, url, { ...options, authorization });
  } catch (error) {
    if (error instanceof ApiError && error.status === 401 && LOGIN_REFUSALS.has(error.message)) {
      logout();
      onUnauthorized(error.message);
    }
    throw error;
  }
}

export const get = (url, query) => request('GET', url, { query });
export const put = (url, body) => request('PUT', url, { body: body ?? {} });
export const post = (url, body) => request('POST', url, { body: body ?? {} });
export const del = (url, headers) => request('DELETE', url, { headers });
