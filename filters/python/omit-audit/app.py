"""omit-audit: a json auditor (world json-auditor-filter) in Python. It
appends the gateway's serialised audit events (kube's audit.k8s.io/v1 Event
JSON lines) to its sink in one write_lines call a batch, less the lines of
the stages its config's `omit_stages` names (as jsonl-audit does in Rust),
chosen by the batch's `stages` without parsing JSON. A bad config raises
ValueError: the filter's error outcome, by the guard filters/build.sh builds
every Python filter with."""

import json

from wit_world import exports
from wit_world.exports.json_auditor import JsonBatch, Stage
from wit_world.imports import host, sink

STAGES = {
    "RequestReceived": Stage.REQUEST_RECEIVED,
    "ResponseStarted": Stage.RESPONSE_STARTED,
    "ResponseComplete": Stage.RESPONSE_COMPLETE,
    "Panic": Stage.PANIC,
}


def omitted_stages():
    """The stages the config's `omit_stages` names."""
    config = json.loads(host.config())
    names = config.get("omit_stages", [])
    unknown = [name for name in names if name not in STAGES]
    if unknown:
        raise ValueError(f"omit-audit: unknown stage(s) {unknown} in omit_stages (expected one of {list(STAGES)})")
    return {STAGES[name] for name in names}


class JsonAuditor(exports.JsonAuditor):
    def audit_json_lines(self, batch: JsonBatch):
        omitted = omitted_stages()
        kept = batch.lines
        if omitted:
            lines = batch.lines.splitlines(keepends=True)
            kept = b"".join(line for line, stage in zip(lines, batch.stages) if stage not in omitted)
        if kept:
            # write_lines raises Err when the sink cannot be written.
            sink.write_lines(kept)
