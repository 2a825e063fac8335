// lines-audit: a json auditor (world json-auditor-filter) in JavaScript. It
// appends the gateway's serialised audit events (kube's audit.k8s.io/v1
// Event JSON lines) to its sink as they are, one writeLines call a batch,
// and logs at debug how many lines of each stage the batch held (from the
// batch's `stages`, without parsing JSON). A value writeLines throws (the
// sink refused the bytes) is the filter's error outcome, by the guard
// filters/build.sh builds every JavaScript filter with.
import { log, logEnabled } from 'wasmgate:filter/host@0.4.0';
import { writeLines } from 'wasmgate:filter/sink@0.4.0';

// How many lines of each stage (`request-received: 1`), for the debug line.
function countStages(stages) {
  const counts = new Map();
  for (const stage of stages) {
    counts.set(stage, (counts.get(stage) ?? 0) + 1);
  }
  return [...counts].map(([stage, count]) => `${stage}: ${count}`).join(', ');
}

export const jsonAuditor = {
  // `batch.lines` is a Uint8Array of whole lines; `batch.stages` their stages.
  auditJsonLines(batch) {
    if (logEnabled('debug')) {
      log('debug', `lines-audit: ${batch.stages.length} lines (${countStages(batch.stages)})`);
    }
    if (batch.lines.length > 0) {
      writeLines(batch.lines);
    }
  },
};
