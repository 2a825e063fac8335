"""{{name}}: an authorizer (world authorizer-filter), scaffolded by
`wasmgate new-filter`. As scaffolded it allows every request: put your
policy in `authorize` and answer Decision_Deny(reason) or
Decision_NoOpinion(reason) where it applies.

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
from wit_world.exports.authorizer import Attributes, Decision_Allow, Decision_Deny, Decision_NoOpinion
from wit_world.imports import host
from wit_world.imports.types import LogLevel


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


class Authorizer(exports.Authorizer):
    def authorize(self, attributes: Attributes):
        settings = config()
        request = attributes.request
        # Formatted only when the gateway's log keeps debug lines.
        if host.log_enabled(LogLevel.DEBUG):
            host.log(LogLevel.DEBUG, f"{attributes.user.name} {request.verb} {request.path} (config: {len(settings)} keys)")
        return Decision_Allow()
