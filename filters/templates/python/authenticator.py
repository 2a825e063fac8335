"""{{name}}: an authenticator (world authenticator-filter), scaffolded by
`wasmgate new-filter`. As scaffolded it has no opinion on any request:
recognise your credentials in `authenticate` and answer
AuthnResult_Authenticated(UserInfo(...)).

componentize-py generates the `wit_world` bindings when filters/build.sh
builds this module (app.py) into a component.

A raised exception is this filter's error outcome, AuthnResult_Error(
"ValueError: ... (at app.py:LINE)"): logged, never shown to the client,
and the request goes on to the next authenticator. MemoryError and
RecursionError stay traps. print(..., file=sys.stderr) lines show in a
trap's detail in `wasmgate try`; `wasi = { stdio = true }` in try.toml
shows every print as it happens."""

import json

from wit_world import exports
from wit_world.exports.authenticator import AuthnResult_Authenticated, AuthnResult_Error, AuthnResult_NoOpinion
from wit_world.imports import host
from wit_world.imports.types import LogLevel, RequestView, UserInfo


def config():
    """The manifest's `config` table, as a dict; ValueError when it is bad."""
    value = json.loads(host.config())
    if not isinstance(value, dict):
        raise ValueError("not a table")
    return value


class Authenticator(exports.Authenticator):
    def authenticate(self, request: RequestView):
        try:
            settings = config()
        except ValueError as error:
            # This filter's error outcome: logged, never shown to the client.
            return AuthnResult_Error(f"{{name}}: bad config: {error}")
        # Formatted only when the gateway's log keeps debug lines. `method`,
        # `path`, `query` and `remote_addr` are given (else None) unless the
        # manifest's `reads` leaves them out (headers: its `headers`).
        if host.log_enabled(LogLevel.DEBUG):
            host.log(LogLevel.DEBUG, f"{request.method or '-'} {request.path or '-'} with {len(request.headers)} headers (config: {len(settings)} keys)")
        # To accept the request: return AuthnResult_Authenticated(UserInfo("alice", "", ["dev"], []))
        return AuthnResult_NoOpinion()
