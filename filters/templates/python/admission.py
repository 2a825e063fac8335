"""{{name}}: an admission filter (world admission-filter), scaffolded by
`wasmgate new-filter`. As scaffolded it allows every object: check (or
change) `request.object` in `admit` and answer
AdmissionResponse_Denied(Status(code, reason, message)), or, listed under
[[admission.mutating]], AdmissionResponse_Mutated(json) or
AdmissionResponse_Patched(json_patch).

componentize-py generates the `wit_world` bindings when filters/build.sh
builds this module (app.py) into a component.

A raised exception is this filter's error outcome, err("ValueError: ...
(at app.py:LINE)"), as Err(message) is err(message): the manifest's
failure_policy decides. MemoryError and RecursionError stay traps.
print(..., file=sys.stderr) lines show in a trap's detail in `wasmgate
try`; `wasi = { stdio = true }` in try.toml shows every print as it happens."""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.admission import (
    AdmissionRequest,
    AdmissionResponse_Allowed,
    AdmissionResponse_Denied,
    AdmissionResponse_Mutated,
    AdmissionResponse_Patched,
)
from wit_world.imports import host
from wit_world.imports.types import LogLevel, Status


def config():
    """The manifest's `config` table, as a dict. Raising Err is this filter's
    own failure: the manifest's failure_policy decides."""
    try:
        value = json.loads(host.config())
    except ValueError as error:
        raise Err(f"{{name}}: bad config: {error}")
    if not isinstance(value, dict):
        raise Err("{{name}}: bad config: not a table")
    return value


class Admission(exports.Admission):
    def admit(self, request: AdmissionRequest):
        settings = config()
        size = len(request.object) if request.object is not None else 0
        operation = request.operation.name.lower()
        # `request` and `user` are given (else None) unless the manifest's
        # `reads` leaves them out (a filter that reads only the object is
        # cheaper to call).
        resource = request.request.resource if request.request is not None else ""
        user = request.user.name if request.user is not None else ""
        # Formatted only when the gateway's log keeps debug lines.
        if host.log_enabled(LogLevel.DEBUG):
            host.log(LogLevel.DEBUG, f"{operation} {resource} by {user}: {size} bytes (config: {len(settings)} keys)")
        return AdmissionResponse_Allowed()
