// {{name}}: an authorizer (world authorizer-filter), scaffolded by `wasmgate
// new-filter`. As scaffolded it allows every request: put your policy in
// `authorize` and answer { tag: 'deny', val: reason } or { tag:
// 'no-opinion', val: reason } where it applies.
//
// componentize-js maps the import below to the host and the `authorizer`
// export to the WIT interface; records arrive as objects with camelCase
// fields, variants are { tag, val }.
//
// A thrown value (an Error, a string, anything) is this filter's error
// outcome, `err('Error: ... (at filter.js:LINE:COL)')` (a thrown string is
// `err` as it is): the manifest's failure_policy decides. An engine fault
// (InternalError: too much recursion) stays a trap. `console.error` lines
// show in a trap's detail in `wasmgate try`; `wasi = { stdio = true }` in
// try.toml shows every line as it happens.
import { config, log, logEnabled } from 'wasmgate:filter/host@0.4.0';

// The manifest's `config` table, as an object. Throwing is this filter's own
// failure: the manifest's failure_policy decides.
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

export const authorizer = {
  authorize(attributes) {
    const cfg = settings();
    const request = attributes.request;
    // Formatted only when the gateway's log keeps debug lines.
    if (logEnabled('debug')) {
      log('debug', `${attributes.user.name} ${request.verb} ${request.path} (config: ${Object.keys(cfg).length} keys)`);
    }
    return { tag: 'allow' };
  },
};
