// {{name}}: an admission filter (world admission-filter), scaffolded by
// `wasmgate new-filter`. As scaffolded it allows every object: check (or
// change) `request.object` (JSON text) in `admit` and answer { tag:
// 'denied', val: { code, reason, message } }, or, listed under
// [[admission.mutating]], { tag: 'mutated', val: json } or { tag: 'patched',
// val: jsonPatch }.
//
// componentize-js maps the import below to the host and the `admission`
// export to the WIT interface; records arrive as objects with camelCase
// fields, enums as strings ('create'), options as a value or undefined.
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

export const admission = {
  admit(request) {
    const cfg = settings();
    const size = request.object == null ? 0 : request.object.length;
    // `request` and `user` are given (else undefined) unless the manifest's
    // `reads` leaves them out (a filter that reads only the object is cheaper
    // to call).
    const resource = request.request?.resource ?? '';
    const user = request.user?.name ?? '';
    // Formatted only when the gateway's log keeps debug lines.
    if (logEnabled('debug')) {
      log('debug', `${request.operation} ${resource} by ${user}: ${size} bytes (config: ${Object.keys(cfg).length} keys)`);
    }
    return { tag: 'allowed' };
  },
};
