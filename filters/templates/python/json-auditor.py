"""{{name}}: a json auditor (world json-auditor-filter), scaffolded by
`wasmgate new-filter`. The gateway hands over a batch of events already
serialised, as Kubernetes' log backend writes them
(--audit-log-format=json): `batch.lines` (bytes) holds one audit.k8s.io/v1
Event JSON object a line, each ending in "\\n", and `batch.stages` each
line's stage, in order. As scaffolded it appends the lines to its sink as
they are, in one write_lines call: drop some by their stages, or forward
them elsewhere, in `audit_json_lines`.

componentize-py generates the `wit_world` bindings when filters/build.sh
builds this module (app.py) into a component.

A raised exception is this filter's error outcome, err("ValueError: ...
(at app.py:LINE)"), as Err(message) is err(message): logged and counted;
audit never fails a request. MemoryError and RecursionError stay traps.
print(..., file=sys.stderr) lines show in a trap's detail in `wasmgate
try`; `wasi = { stdio = true }` in try.toml shows every print as it happens."""

import json

from componentize_py_types import Err
from wit_world import exports

from wit_world.exports.json_auditor import JsonBatch
from wit_world.imports import host, sink
from wit_world.imports.types import LogLevel


def config():
    """The manifest's `config` table, as a dict. Raising Err is this filter's
    own failure: logged and counted; audit never fails a request."""
    try:
        value = json.loads(host.config())
    except ValueError as error:
        raise Err(f"{{name}}: bad config: {error}")
    if not isinstance(value, dict):
        raise Err("{{name}}: bad config: not a table")
    return value


class JsonAuditor(exports.JsonAuditor):
    def audit_json_lines(self, batch: JsonBatch):
        """The batch's lines, in the order their events happened."""
        settings = config()
        # Formatted only when the gateway's log keeps debug lines.
        if host.log_enabled(LogLevel.DEBUG):
            host.log(LogLevel.DEBUG, f"{len(batch.stages)} lines (config: {len(settings)} keys)")
        # Whole lines, appended as they are; write_lines raises Err when the
        # sink cannot be written.
        if batch.lines:
            sink.write_lines(batch.lines)
