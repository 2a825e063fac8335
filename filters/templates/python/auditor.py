"""{{name}}: an auditor (world auditor-filter), scaffolded by
`wasmgate new-filter`. As scaffolded it writes one JSON line per event to
its sink: choose what to record in `audit`. The gateway hands over the
events in batches (`audit_batch`), in the order they happened.

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
from typing import List

from wit_world.exports.auditor import Event
from wit_world.imports import host, sink
from wit_world.imports.types import LogLevel

STAGES = {0: "RequestReceived", 1: "ResponseStarted", 2: "ResponseComplete", 3: "Panic"}


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


class Auditor(exports.Auditor):
    def audit_batch(self, events: List[Event]):
        """The events of a batch, in the order they happened."""
        settings = config()
        for event in events:
            self.audit(event, settings)

    def audit(self, event: Event, settings: dict):
        record = {
            "auditID": event.audit_id,
            "stage": STAGES[event.stage.value],
            "verb": event.verb,
            "requestURI": event.request_uri,
            "user": event.user.name,
            "code": event.response_status.code if event.response_status is not None else None,
        }
        # Formatted only when the gateway's log keeps debug lines.
        if host.log_enabled(LogLevel.DEBUG):
            host.log(LogLevel.DEBUG, f"event {event.audit_id} (config: {len(settings)} keys)")
        # sink.write raises Err when the sink cannot be written.
        sink.write(json.dumps(record, separators=(",", ":")))
