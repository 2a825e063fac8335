// wasmgate's guard around a JavaScript filter's export.
//
// filters/build.sh builds a JavaScript filter from a generated entry module
// that imports the filter's filter.js and exports its object through
// `guard`, so every JavaScript filter gets the same rule:
//
// - a value the filter throws is its error outcome: an Error as its name,
//   message and line (`Error: no key (at filter.js:12:9)`), a string as it
//   is, anything else as String(value) (an object with an own `payload`, the
//   componentize-js convention, as its payload). That is `err(...)` for
//   authorizers, admission filters and auditors (record and JSON) and the
//   `error(...)` case for authenticators: what the WIT names the filter's
//   own failure, which the manifest's failure_policy then decides about.
//   componentize-js alone would make a thrown Error a trap, and lose its
//   message;
// - SpiderMonkey's InternalError (too much recursion, and the like) is the
//   engine out of stack or memory: it stays a trap (the instance is thrown
//   away, never reused), printed to stderr first (with the first frames of
//   its stack), which `wasmgate try` shows in the trap's detail.

// How much of an engine fault's stack is printed.
const STACK_LINES = 8;

const OWN_FILES = /(^|\/)wasmgate-(guard|entry)\.js:/;

function isEngineFault(thrown) {
  return typeof InternalError === 'function' && thrown instanceof InternalError;
}

// Where in the filter's own code an Error was thrown: the first frame of its
// stack outside this guard (`name@file:line:col` lines in SpiderMonkey).
function origin(error) {
  const frames = typeof error.stack === 'string' ? error.stack.split('\n') : [];
  for (const frame of frames) {
    const at = frame.slice(frame.indexOf('@') + 1).replace(/^\/+/, '');
    if (at && !OWN_FILES.test(at)) {
      return at;
    }
  }
  return '';
}

export function describe(thrown) {
  if (thrown instanceof Error) {
    const text = thrown.message ? `${thrown.name}: ${thrown.message}` : thrown.name;
    const at = origin(thrown);
    return at ? `${text} (at ${at})` : text;
  }
  if (thrown !== null && typeof thrown === 'object' && Object.prototype.hasOwnProperty.call(thrown, 'payload')) {
    return String(thrown.payload);
  }
  return String(thrown);
}

// Each world's one function, and how its export says "failed": a result's
// `err`, or the authenticator's `error` case.
const WORLDS = {
  authenticator: ['authenticate', (message) => ({ tag: 'error', val: message })],
  authorizer: ['authorize', (message) => ({ tag: 'err', val: message })],
  admission: ['admit', (message) => ({ tag: 'err', val: message })],
  auditor: ['auditBatch', (message) => ({ tag: 'err', val: message })],
  jsonAuditor: ['auditJsonLines', (message) => ({ tag: 'err', val: message })],
};

// The filter's export `implementation` for world `kind`, its function wrapped
// so that a thrown value is the error outcome.
export function guard(kind, implementation) {
  const [name, failed] = WORLDS[kind];
  if (typeof implementation?.[name] !== 'function') {
    throw new TypeError(`filter.js must export ${kind} with a function ${name}: export const ${kind} = { ${name}(...) { ... } };`);
  }
  return {
    [name](...args) {
      try {
        return implementation[name](...args);
      } catch (thrown) {
        if (isEngineFault(thrown)) {
          // The error and where it started, not thousands of repeated frames.
          const frames = String(thrown.stack ?? '').split('\n').slice(0, STACK_LINES);
          console.error(`${thrown.name}: ${thrown.message}\n${frames.join('\n')}`);
          // An Error is a trap to componentize-js. A new one, thrown from
          // here: the engine reports it with a stack of a few frames, where
          // the fault's own would push the lines above out of the tail of
          // stderr the host keeps.
          throw new Error(`${kind}.${name}: ${thrown.name}: ${thrown.message}`);
        }
        return failed(describe(thrown));
      }
    },
  };
}
