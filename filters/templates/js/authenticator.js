// {{name}}: an authenticator (world authenticator-filter), scaffolded by
// `wasmgate new-filter`. As scaffolded it has no opinion on any request:
// recognise your credentials in `authenticate` and answer { tag:
// 'authenticated', val: { name, uid, groups, extra } }.
//
// componentize-js maps the import below to the host and the `authenticator`
// export to the WIT interface; records arrive as objects with camelCase
// fields, variants are { tag, val }.
//
// A thrown value (an Error, a string, anything) is this filter's error
// outcome, `{ tag: 'error', val: 'Error: ... (at filter.js:LINE:COL)' }`:
// logged, never shown to the client, and the request goes on to the next
// authenticator. An engine fault (InternalError: too much recursion) stays a
// trap. `console.error` lines show in a trap's detail in `wasmgate try`;
// `wasi = { stdio = true }` in try.toml shows every line as it happens.
import { config, log, logEnabled } from 'wasmgate:filter/host@0.4.0';

// The manifest's `config` table, as an object; throws a message when bad.
function settings() {
  let value;
  try {
    value = JSON.parse(config());
  } catch (error) {
    throw `{{name}}: bad config: ${error.message}`;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw '{{name}}: bad config: not a table';
  }
  return value;
}

export const authenticator = {
  authenticate(request) {
    let cfg;
    try {
      cfg = settings();
    } catch (message) {
      // This filter's error outcome: logged, never shown to the client.
      return { tag: 'error', val: message };
    }
    // Formatted only when the gateway's log keeps debug lines. `method`,
    // `path`, `query` and `remoteAddr` are given (else undefined) unless the
    // manifest's `reads` leaves them out (headers: its `headers`).
    if (logEnabled('debug')) {
      log('debug', `${request.method ?? '-'} ${request.path ?? '-'} with ${request.headers.length} headers (config: ${Object.keys(cfg).length} keys)`);
    }
    // To accept the request: return { tag: 'authenticated', val: { name: 'alice', uid: '', groups: ['dev'], extra: [] } };
    return { tag: 'no-opinion' };
  },
};
