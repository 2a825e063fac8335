"""Host tests of logic.py (no bindings, no Wasm): filters/build.sh --test
runs them with `python3 -m unittest`."""

import calendar
import unittest

import logic

WRITES = ["create", "update", "patch", "delete", "deletecollection"]
CONFIG = {
    "utc_offset": "+01:00",
    "rules": [
        {
            "name": "working-hours",
            "effect": "deny",
            "groups": ["developers"],
            "verbs": WRITES,
            "outside": {"days": ["mon", "tue", "wed", "thu", "fri"], "hours": "08:00-18:00"},
            "reason": "developers write only Mon-Fri 08:00-18:00",
        },
        {"name": "ops-only", "effect": "deny", "namespaces": ["kube-system"], "verbs": WRITES},
        {"name": "reads", "effect": "allow", "verbs": ["get", "list", "watch"], "resources": ["*"]},
        {"name": "dev-writes", "effect": "allow", "groups": ["developers"], "api_groups": ["demo.example.io"]},
        {"name": "metrics", "effect": "allow", "non_resource_paths": ["/metrics", "/debug/*"], "users": ["alice"]},
    ],
}


def at(text):
    """Epoch seconds of a UTC time `YYYY-MM-DD HH:MM`."""
    return calendar.timegm(__import__("time").strptime(text, "%Y-%m-%d %H:%M"))


def widgets(verb, groups=("developers",), namespace="default", user="alice"):
    return logic.Request(user=user, groups=list(groups), verb=verb, api_group="demo.example.io",
                         namespace=namespace, resource="widgets")


class Decide(unittest.TestCase):
    def setUp(self):
        self.policy = logic.parse_policy(CONFIG)

    def decide(self, request, when):
        return logic.decide(self.policy, request, at(when))[:2]

    def test_writes_in_working_hours_are_allowed(self):
        # Wednesday 2026-01-07 09:30 UTC is 10:30 at +01:00.
        self.assertEqual(self.decide(widgets("create"), "2026-01-07 09:30"), ("allow", "allow by abac-authz rule 'dev-writes'"))

    def test_writes_outside_working_hours_are_denied(self):
        # 17:30 UTC is 18:30 at +01:00: after hours.
        self.assertEqual(self.decide(widgets("update"), "2026-01-07 17:30"),
                         ("deny", "developers write only Mon-Fri 08:00-18:00"))
        # 06:59 UTC is 07:59 local: before hours. Saturday: never.
        self.assertEqual(self.decide(widgets("delete"), "2026-01-07 06:59")[0], "deny")
        self.assertEqual(self.decide(widgets("create"), "2026-01-10 10:00")[0], "deny")
        # 07:00 UTC is 08:00 local: the window opens.
        self.assertEqual(self.decide(widgets("delete"), "2026-01-07 07:00")[0], "allow")

    def test_reads_are_allowed_at_any_time(self):
        self.assertEqual(self.decide(widgets("list"), "2026-01-10 03:00")[0], "allow")
        self.assertEqual(self.decide(widgets("get", groups=["viewers"]), "2026-01-10 03:00")[0], "allow")

    def test_other_groups_are_not_restricted_by_the_hours_rule(self):
        # Not a developer: no rule grants the write, so no opinion.
        self.assertEqual(self.decide(widgets("create", groups=["viewers"]), "2026-01-10 03:00"),
                         ("no-opinion", "no abac-authz rule matched"))

    def test_namespaces_and_default_reasons(self):
        self.assertEqual(self.decide(widgets("create", namespace="kube-system"), "2026-01-07 09:30"),
                         ("deny", "deny by abac-authz rule 'ops-only'"))

    def test_non_resource_paths(self):
        request = logic.Request(user="alice", groups=[], verb="get", is_resource_request=False, path="/debug/pprof")
        self.assertEqual(self.decide(request, "2026-01-07 09:30")[0], "allow")
        request.path = "/debugger"
        self.assertEqual(self.decide(request, "2026-01-07 09:30")[0], "no-opinion")
        request.user, request.path = "bob", "/metrics"
        self.assertEqual(self.decide(request, "2026-01-07 09:30")[0], "no-opinion")


class Windows(unittest.TestCase):
    def test_a_window_past_midnight_belongs_to_the_day_it_opened(self):
        window = logic._window({"days": ["fri"], "hours": "22:00-06:00"}, "w")
        friday, saturday, sunday = 4, 5, 6
        self.assertTrue(window.contains(friday, 23 * 60))
        self.assertTrue(window.contains(saturday, 5 * 60))
        self.assertFalse(window.contains(saturday, 23 * 60))
        self.assertFalse(window.contains(friday, 5 * 60))
        self.assertFalse(window.contains(sunday, 1 * 60))

    def test_whole_days(self):
        window = logic._window({"days": ["sat", "sun"]}, "w")
        self.assertTrue(window.contains(5, 0) and window.contains(6, 24 * 60 - 1))
        self.assertFalse(window.contains(0, 12 * 60))


class BadConfig(unittest.TestCase):
    def assertBad(self, config, message):
        with self.assertRaises(logic.ConfigError) as caught:
            logic.parse_policy(config)
        self.assertTrue(str(caught.exception).startswith("abac-authz: bad config: "), str(caught.exception))
        self.assertIn(message, str(caught.exception))

    def test_mistakes_are_named(self):
        self.assertBad([], "the config must be a table")
        self.assertBad({}, "rules must be a list of tables")
        self.assertBad({"rules": [], "extra": 1}, "unknown key 'extra'")
        self.assertBad({"rules": [{"effect": "permit"}]}, "rules[0].effect must be one of allow, deny, no-opinion")
        self.assertBad({"rules": [{"effect": "allow", "verbs": "get"}]}, "rules[0].verbs must be a list of strings")
        self.assertBad({"rules": [{"effect": "allow", "during": {"days": ["monday"]}}]}, "'monday' is not one of")
        self.assertBad({"rules": [{"effect": "allow", "during": {"hours": "9-17"}}]}, "is not a time of day")
        self.assertBad({"rules": [{"effect": "allow", "during": {}, "outside": {}}]}, "not both")
        self.assertBad({"rules": [{"effect": "allow", "non_resource_paths": ["/x"], "resources": ["y"]}]},
                       "cannot be combined")
        self.assertBad({"utc_offset": "CET", "rules": []}, "is not an offset")


if __name__ == "__main__":
    unittest.main()
