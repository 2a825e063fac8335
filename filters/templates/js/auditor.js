// {{name}}: an auditor (world auditor-filter), scaffolded by `wasmgate
// new-filter`. As scaffolded it writes one JSON line per event to its sink:
// choose what to record in `audit`. The gateway hands over the events in
// batches (`auditBatch`), in the order they happened.
//
// componentize-js maps the imports below to the host and the `auditor`
// export to the WIT interface; records arrive as objects with camelCase
// fields, enums as strings ('request-received'), options as a value or
// undefined.
//
// A thrown value (an Error, a string, anything) is this filter's error
// outcome, `err('Error: ... (at filter.js:LINE:COL)')` (a thrown string is
// `err` as it is): logged and counted, audit never fails a request. An
// engine fault (InternalError: too much recursion) stays a trap.
// `console.error` lines show in a trap's detail in `wasmgate try`; `wasi = {
// stdio = true }` in try.toml shows every line as it happens.
import { config, log, logEnabled } from 'wasmgate:filter/host@0.4.0';
import { write } from 'wasmgate:filter/sink@0.4.0';

const STAGES = {
  'request-received': 'RequestReceived',
  'response-started': 'ResponseStarted',
  'response-complete': 'ResponseComplete',
  panic: 'Panic',
};

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

// One event's line.
function audit(event, cfg) {
  const record = {
    auditID: event.auditId,
    stage: STAGES[event.stage],
    verb: event.verb,
    requestURI: event.requestUri,
    user: event.user.name,
    code: event.responseStatus == null ? null : event.responseStatus.code,
  };
  // Formatted only when the gateway's log keeps debug lines.
  if (logEnabled('debug')) {
    log('debug', `event ${event.auditId} (config: ${Object.keys(cfg).length} keys)`);
  }
  // write throws when the sink cannot be written.
  write(JSON.stringify(record));
}

export const auditor = {
  // The events of a batch, in the order they happened.
  auditBatch(events) {
    const cfg = settings();
    for (const event of events) {
      audit(event, cfg);
    }
  },
};
