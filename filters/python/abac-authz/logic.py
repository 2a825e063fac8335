"""The policy of abac-authz, free of bindings and host calls: parse the
config, then decide a request at a given time. app.py feeds it the WIT
records; test_logic.py runs it under the system's python3."""

from dataclasses import dataclass, field
import re
import time

FILTER = "abac-authz"
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
EFFECTS = ("allow", "deny", "no-opinion")
# Compiled at import: componentize-py snapshots the module after importing
# it, so a fresh instance starts with these ready (compiling them per
# instance would double its start-up cost).
CLOCK = re.compile(r"(\d{2}):(\d{2})")
OFFSET = re.compile(r"([+-])(\d{2}):(\d{2})")
RULE_KEYS = {
    "name", "effect", "reason", "users", "groups", "verbs", "resources", "api_groups",
    "namespaces", "non_resource_paths", "during", "outside",
}


class ConfigError(Exception):
    """A config mistake; the message starts with `abac-authz: bad config:`."""

    def __init__(self, message):
        super().__init__(f"{FILTER}: bad config: {message}")


@dataclass
class Request:
    """What a rule can look at: the user and kube's request info."""

    user: str
    groups: list
    verb: str
    is_resource_request: bool = True
    api_group: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    path: str = ""


@dataclass
class Window:
    """Days of the week and a time of day range, in minutes since midnight.
    `start > end` wraps past midnight (22:00-06:00)."""

    days: frozenset
    start: int
    end: int

    def contains(self, weekday, minute):
        if self.start <= self.end:
            return weekday in self.days and self.start <= minute < self.end
        # Past midnight: the early part belongs to the window opened the day before.
        if minute >= self.start:
            return weekday in self.days
        return minute < self.end and (weekday - 1) % 7 in self.days


@dataclass
class Rule:
    name: str
    effect: str
    reason: str
    users: list = None
    groups: list = None
    verbs: list = None
    resources: list = None
    api_groups: list = None
    namespaces: list = None
    non_resource_paths: list = None
    during: Window = None
    outside: Window = None


@dataclass
class Policy:
    utc_offset_minutes: int = 0
    rules: list = field(default_factory=list)


def _string_list(value, where):
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where} must be a list of strings")
    return value


def _clock(text, where):
    match = CLOCK.fullmatch(text)
    if not match or int(match[1]) > 24 or int(match[2]) > 59 or (int(match[1]) == 24 and match[2] != "00"):
        raise ConfigError(f"{where}: {text!r} is not a time of day HH:MM (00:00 to 24:00)")
    return int(match[1]) * 60 + int(match[2])


def _window(value, where):
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table with days and/or hours")
    unknown = set(value) - {"days", "hours"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} (expected days, hours)")
    days = _string_list(value.get("days", list(DAYS)), f"{where}.days")
    for day in days:
        if day.lower() not in DAYS:
            raise ConfigError(f"{where}.days: {day!r} is not one of {', '.join(DAYS)}")
    hours = value.get("hours", "00:00-24:00")
    if not isinstance(hours, str) or hours.count("-") != 1:
        raise ConfigError(f"{where}.hours must be a range \"HH:MM-HH:MM\"")
    start, end = (_clock(part.strip(), f"{where}.hours") for part in hours.split("-"))
    if start == end:
        raise ConfigError(f"{where}.hours is empty: {hours!r}")
    return Window(frozenset(DAYS.index(day.lower()) for day in days), start, end)


def _offset(text):
    match = OFFSET.fullmatch(text) if isinstance(text, str) else None
    if not match or int(match[2]) > 14 or int(match[3]) > 59:
        raise ConfigError(f"utc_offset: {text!r} is not an offset like \"+01:00\" or \"-05:30\"")
    minutes = int(match[2]) * 60 + int(match[3])
    return minutes if match[1] == "+" else -minutes


def parse_policy(config):
    """The policy of a config (the manifest's `config` table, decoded)."""
    if not isinstance(config, dict):
        raise ConfigError("the config must be a table")
    unknown = set(config) - {"utc_offset", "rules"}
    if unknown:
        raise ConfigError(f"unknown key {sorted(unknown)[0]!r} (expected utc_offset, rules)")
    rules = config.get("rules")
    if not isinstance(rules, list):
        raise ConfigError("rules must be a list of tables")
    policy = Policy(utc_offset_minutes=_offset(config.get("utc_offset", "+00:00")))
    for index, raw in enumerate(rules):
        where = f"rules[{index}]"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where} must be a table")
        unknown = set(raw) - RULE_KEYS
        if unknown:
            raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}")
        effect = raw.get("effect")
        if effect not in EFFECTS:
            raise ConfigError(f"{where}.effect must be one of {', '.join(EFFECTS)}")
        name = raw.get("name", where)
        if not isinstance(name, str):
            raise ConfigError(f"{where}.name must be a string")
        reason = raw.get("reason", f"{effect} by {FILTER} rule {name!r}")
        if not isinstance(reason, str):
            raise ConfigError(f"{where}.reason must be a string")
        rule = Rule(name=name, effect=effect, reason=reason)
        for key in ("users", "groups", "verbs", "resources", "api_groups", "namespaces", "non_resource_paths"):
            if key in raw:
                setattr(rule, key, _string_list(raw[key], f"{where}.{key}"))
        if rule.non_resource_paths is not None and any(
            getattr(rule, key) is not None for key in ("resources", "api_groups", "namespaces")
        ):
            raise ConfigError(f"{where}: non_resource_paths cannot be combined with resources, api_groups or namespaces")
        if "during" in raw and "outside" in raw:
            raise ConfigError(f"{where}: give during or outside, not both")
        for key in ("during", "outside"):
            if key in raw:
                setattr(rule, key, _window(raw[key], f"{where}.{key}"))
        policy.rules.append(rule)
    return policy


def _listed(values, value):
    return values is None or "*" in values or value in values


def _path_listed(patterns, path):
    return any(
        pattern == "*" or pattern == path or (pattern.endswith("*") and path.startswith(pattern[:-1]))
        for pattern in patterns
    )


def matches(rule, request, weekday, minute):
    """Whether every attribute the rule names matches the request."""
    if rule.users is not None and request.user not in rule.users:
        return False
    if rule.groups is not None and "*" not in rule.groups and not set(rule.groups) & set(request.groups):
        return False
    if not _listed(rule.verbs, request.verb):
        return False
    if rule.non_resource_paths is not None:
        if request.is_resource_request or not _path_listed(rule.non_resource_paths, request.path):
            return False
    if any(getattr(rule, key) is not None for key in ("resources", "api_groups", "namespaces")):
        if not request.is_resource_request:
            return False
        resource = request.resource + (f"/{request.subresource}" if request.subresource else "")
        if not _listed(rule.resources, resource):
            return False
        if not _listed(rule.api_groups, request.api_group) or not _listed(rule.namespaces, request.namespace):
            return False
    if rule.during is not None and not rule.during.contains(weekday, minute):
        return False
    if rule.outside is not None and rule.outside.contains(weekday, minute):
        return False
    return True


def local_time(policy, now):
    """(weekday with Monday 0, minute of the day) at epoch seconds `now` in
    the policy's UTC offset."""
    moment = time.gmtime(now + policy.utc_offset_minutes * 60)
    return moment.tm_wday, moment.tm_hour * 60 + moment.tm_min


def decide(policy, request, now):
    """(effect, reason, rule name or None): the first matching rule's, else
    no opinion."""
    weekday, minute = local_time(policy, now)
    for rule in policy.rules:
        if matches(rule, request, weekday, minute):
            return rule.effect, rule.reason, rule.name
    return "no-opinion", f"no {FILTER} rule matched", None
