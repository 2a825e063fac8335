// schema-admission: a validating admission filter that checks objects
// against JSON-schema rules from its config, and denies invalid ones with
// kube's 422 Invalid.
//
// This module is the WIT glue (world admission-filter; componentize-js maps
// the imports below to the host and this module's `admission` export to the
// WIT interface); the logic is in logic.js, tested by logic.test.js.
import { config, log, logEnabled } from 'wasmgate:filter/host@0.4.0';

import { compilePolicy, ConfigError, review } from './logic.js';

// The config never changes for a loaded filter: a pooled instance compiles it
// once and keeps the policy while the host hands the same text.
let cached = { text: null, policy: null };

function policy() {
  const text = config();
  if (cached.text !== text) {
    let parsed;
    try {
      parsed = JSON.parse(text);
    } catch (error) {
      throw new ConfigError(`not JSON: ${error.message}`);
    }
    cached = { text, policy: compilePolicy(parsed) };
  }
  return cached.policy;
}

export const admission = {
  // Returning a value is `ok(value)`; throwing is `err(message)`.
  admit(request) {
    let compiled;
    try {
      compiled = policy();
    } catch (error) {
      log('error', error.message);
      throw error.message;
    }
    const verdict = review(compiled, request);
    if (verdict.allowed) {
      if (logEnabled('debug')) {
        log('debug', `allowed: ${verdict.why}`);
      }
      return { tag: 'allowed' };
    }
    log('info', `denied: ${verdict.status.message}`);
    return { tag: 'denied', val: verdict.status };
  },
};
