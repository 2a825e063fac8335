"""wasmgate's guard around a Python filter's export.

filters/build.sh builds a Python filter from a generated entry module that
imports the filter's app.py and exports its class through one of the
functions below, so every Python filter gets the same rule:

- an exception the filter raises is its error outcome, with the exception's
  type, message and line: `err(...)` for authorizers, admission filters and
  auditors (record and JSON), the `error(...)` case for authenticators
  (what the WIT names the filter's own failure; the manifest's
  failure_policy decides what happens to the request). `Err(message)` is passed on as it is;
- MemoryError and RecursionError are the interpreter out of memory or
  stack: they stay traps (the instance is thrown away, never reused), and
  componentize-py prints their traceback to stderr, which `wasmgate try`
  shows in the trap's detail. So does a BaseException that is no Exception
  (SystemExit, KeyboardInterrupt).
"""

import os
import traceback

from componentize_py_types import Err

# The filter's own modules sit beside this one in the component.
_SOURCES = os.path.dirname(os.path.abspath(__file__))


def describe(error):
    """`ValueError: message (at logic.py:12)`: the exception and the line of
    the filter's own code that raised it (or called what raised it)."""
    message = str(error)
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    own = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if os.path.dirname(os.path.abspath(frame.filename)) == _SOURCES
        and os.path.basename(frame.filename) != os.path.basename(__file__)
    ]
    if own:
        text += f" (at {os.path.basename(own[-1].filename)}:{own[-1].lineno})"
    return text


def _guarded(cls, method, failed):
    """A subclass of the filter's class whose `method` turns exceptions into
    `failed(message)`."""
    original = getattr(cls, method)

    def call(self, *args):
        try:
            return original(self, *args)
        except (Err, MemoryError, RecursionError):
            raise
        except Exception as error:  # noqa: BLE001 - every filter failure is an error outcome
            return failed(describe(error))

    call.__name__ = method
    call.__qualname__ = f"{cls.__name__}.{method}"
    return type(cls.__name__, (cls,), {method: call, "__module__": cls.__module__})


def _raise_err(message):
    raise Err(message)


def authenticator(cls):
    from wit_world.exports.authenticator import AuthnResult_Error

    return _guarded(cls, "authenticate", AuthnResult_Error)


def authorizer(cls):
    return _guarded(cls, "authorize", _raise_err)


def admission(cls):
    return _guarded(cls, "admit", _raise_err)


def auditor(cls):
    return _guarded(cls, "audit_batch", _raise_err)


def json_auditor(cls):
    return _guarded(cls, "audit_json_lines", _raise_err)
