"""raise-authz: a test fixture authorizer (world authorizer-filter) that
fails as the request path's last segment says, the ways a Python author's
code fails: it raises an exception (the filter's error outcome, by the guard
filters/build.sh builds every Python filter with), raises componentize-py's
Err, or recurses without end (RecursionError: a trap, its traceback on
stderr). Anything else is allowed. Not for production manifests."""

import sys

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.authorizer import Attributes, Decision_Allow


def lookup(rules, key):
    # A plain dict lookup: a missing key raises KeyError from this line.
    return rules[key]


def descend(depth):
    return descend(depth + 1) + 1


class Authorizer(exports.Authorizer):
    def authorize(self, attributes: Attributes):
        fault = attributes.request.path.rsplit("/", 1)[-1]
        if fault == "raise":
            raise ValueError(f"raise-authz: no rule for {attributes.user.name}")
        if fault == "keyerror":
            lookup({}, "rules")
        if fault == "err":
            raise Err("raise-authz: Err requested")
        if fault == "recurse":
            print("raise-authz: about to recurse without end", file=sys.stderr)
            descend(0)
        return Decision_Allow()
