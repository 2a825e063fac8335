// {{name}}: a json auditor (world json-auditor-filter), scaffolded by
// `wasmgate new-filter`. The gateway hands over a batch of events already
// serialised, as Kubernetes' log backend writes them
// (--audit-log-format=json): `batch.lines` (a Uint8Array) holds one
// audit.k8s.io/v1 Event JSON object a line, each ending in '\n', and
// `batch.stages` each line's stage ('request-received', ...), in order. As
// scaffolded it appends the lines to its sink as they are, in one writeLines
// call: drop some by their stages, or forward them elsewhere, in
// `auditJsonLines`.
//
// componentize-js maps the imports below to the host and the `jsonAuditor`
// export to the WIT interface `json-auditor`.
//
// A thrown value (an Error, a string, anything) is this filter's error
// outcome, `err('Error: ... (at filter.js:LINE:COL)')` (a thrown string is
// `err` as it is): logged and counted, audit never fails a request. An
// engine fault (InternalError: too much recursion) stays a trap.
// `console.error` lines show in a trap's detail in `wasmgate try`; `wasi = {
// stdio = true }` in try.toml shows every line as it happens.
import { config, log, logEnabled } from 'wasmgate:filter/host@0.4.0';
import { writeLines } from 'wasmgate:filter/sink@0.4.0';

// The manifest's `config` table, as an object. Throwing is this filter's own
// failure: logged and counted; audit never fails a request.
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

export const jsonAuditor = {
  // The batch's lines, in the order their events happened.
  auditJsonLines(batch) {
    const cfg = settings();
    // Formatted only when the gateway's log keeps debug lines.
    if (logEnabled('debug')) {
      log('debug', `${batch.stages.length} lines (config: ${Object.keys(cfg).length} keys)`);
    }
    // Whole lines, appended as they are; writeLines throws when the sink
    // cannot be written.
    if (batch.lines.length > 0) {
      writeLines(batch.lines);
    }
  },
};
