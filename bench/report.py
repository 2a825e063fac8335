#!/usr/bin/env python3
"""Summarises bench/run.sh's raw rows (standard library only).

    report.py slowest RAW                   the slowest target's median req/s (for the open-loop rate)
    report.py smoke RAW                     smoke assertions; exit 1 when one fails
    report.py audit FILE START END          requests received in [START, END] (epoch seconds) that
                                            FILE records as complete: wasmgate's ResponseComplete
                                            audit events, or nginx + Lua's log lines
    report.py full RAW META PREFIX [--readme=FILE]
                                            (RAW and META may both be an earlier run's PREFIX.json,
                                            to write its table again)
                                            PREFIX.tsv, PREFIX.json, PREFIX.md; with --readme, the
                                            table goes between the results markers of FILE

Ratios (to nginx, to direct, to nginx-lua) are computed per round, then the
median over rounds is reported; absolute figures are medians over rounds too.
"""

import csv
import datetime
import json
import re
import statistics
import sys

NUMERIC = ["requests", "seconds", "rps", "non2xx", "socket_errors", "cpu_us_per_req",
           "upstream_cpu_us_per_req", "p50_us", "p90_us", "p99_us", "cpu0_other_pct", "load1", "audited",
           "syscalls_per_req", "ctxsw_per_req", "cpu0_steal_pct", "minflt_per_req", "majflt_per_req",
           "cache_hit_pct", "user_cpu_us_per_req", "preempted_per_req", "shared_cache_ns"]

LABELS = {
    "direct": "direct to the upstream",
    "nginx": "nginx (proxy, 1 worker)",
    "nginx-lua": "nginx + Lua (token authn, allow-list authz, label admission, audit event)",
    "nginx-lua-many-users": "nginx + Lua, the same policy, 10,000 users' tokens at random",
    "haproxy": "HAProxy (1 thread)",
    "hyper-proxy": "a bare hyper proxy (the floor of wasmgate's stack)",
    "hyper-raw-client": "hyper's server, the upstream spoken to without an HTTP library",
    "raw-proxy": "a proxy with no HTTP library (httparse, headers forwarded as parsed)",
    "raw-proxy-typed": "the same, building the http crate's typed request and response as well",
    "wasmgate-pass": "wasmgate pass-through (no filter)",
    "wasmgate-full-per-request": "wasmgate full chain, per-request isolation, decision caches on",
    "wasmgate-full-pooled": "wasmgate full chain, pooled isolation, decision caches on",
    "wasmgate-full-pooled-nocache": "wasmgate full chain, pooled isolation, no decision cache",
    "wasmgate-full-pooled-many-users": "wasmgate full chain, pooled, caches on, 10,000 users' tokens at random",
    "wasmgate-full-python": "wasmgate full chain, pooled, plus the Python abac-authz filter",
    "nginx-tls": "nginx, TLS",
    "wasmgate-pass-tls": "wasmgate pass-through, TLS",
}

BEGIN_MARK = "<!-- side-by-side:results:begin (bench/run.sh --update-readme rewrites this part) -->"
END_MARK = "<!-- side-by-side:results:end -->"


def load(path):
    if path.endswith(".json"):
        # a results file of an earlier run: its rounds are the raw rows
        with open(path) as handle:
            rows = json.load(handle)["rounds"]
        for row in rows:
            for key in NUMERIC:
                row[key] = float(row[key]) if row.get(key) not in ("", None) else None
            row["round"] = int(row["round"])
        return rows
    rows = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            for key in NUMERIC:
                value = row.get(key, "")
                row[key] = float(value) if value not in ("", None) else None
            row["round"] = int(row["round"])
            rows.append(row)
    return rows


def by(rows, phase):
    """{target: {round: row}} for one phase."""
    table = {}
    for row in rows:
        if row["phase"] == phase:
            table.setdefault(row["target"], {})[row["round"]] = row
    return table


def targets_in_order(rows):
    seen = []
    order = list(LABELS)
    for row in rows:
        if row["target"] not in seen:
            seen.append(row["target"])
    return sorted(seen, key=lambda t: (order.index(t) if t in order else len(order), t))


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def per_round_ratio(table, target, base, key, op="div"):
    if target not in table or base not in table:
        return None
    values = []
    for rnd, row in table[target].items():
        other = table[base].get(rnd)
        if other is None or row[key] is None or other[key] in (None, 0):
            continue
        values.append(row[key] / other[key] if op == "div" else row[key] - other[key])
    return median(values)


def per_round_inverse(table, target, base, key):
    """The median over rounds of base's figure over target's (CPU per request: the req/s ratio it implies)."""
    ratio = per_round_ratio(table, target, base, key)
    return None if not ratio else 1 / ratio


def summarise(rows):
    throughput, oneconn, openloop = by(rows, "throughput"), by(rows, "oneconn"), by(rows, "openloop")
    summary = {}
    for target in targets_in_order(rows):
        t = throughput.get(target, {})
        o = oneconn.get(target, {})
        q = openloop.get(target, {})
        entry = {
            "label": LABELS.get(target, target),
            "rounds": len(t),
            "rps": median(r["rps"] for r in t.values()),
            "rps_min": min((r["rps"] for r in t.values()), default=None),
            "rps_max": max((r["rps"] for r in t.values()), default=None),
            "cpu_us_per_req": median(r["cpu_us_per_req"] for r in t.values()),
            # the user-space part of it (utime); the rest is the kernel's
            "user_cpu_us_per_req": median(r.get("user_cpu_us_per_req") for r in t.values()),
            "upstream_cpu_us_per_req": median(r["upstream_cpu_us_per_req"] for r in t.values()),
            "cpu0_other_pct": median(r["cpu0_other_pct"] for r in t.values()),
            "syscalls_per_req": median(r.get("syscalls_per_req") for r in t.values()),
            "ctxsw_per_req": median(r.get("ctxsw_per_req") for r in t.values()),
            # of which involuntary: the core given to something else
            "preempted_per_req": median(r.get("preempted_per_req") for r in t.values()),
            "cpu0_steal_pct": median(r.get("cpu0_steal_pct") for r in t.values()),
            "minflt_per_req": median(r.get("minflt_per_req") for r in t.values()),
            "majflt_per_req": median(r.get("majflt_per_req") for r in t.values()),
            # bench/probe.c's 4 MiB chase just before each window: what the
            # shared cache gave the core then
            "shared_cache_ns": median(r.get("shared_cache_ns") for r in t.values()),
            "shared_cache_rounds": [r.get("shared_cache_ns") for _, r in sorted(t.items())],
            # the decision caches' hits over their lookups in the window (all
            # cached filters); None for a target without a cache
            "cache_hit_pct": median(r.get("cache_hit_pct") for r in t.values()),
            "cache_detail": "; ".join(r["cache_detail"] for _, r in sorted(t.items()) if r.get("cache_detail")),
            # the share of the window's requests whose completion was audited
            # (logged, for nginx + Lua); below 1 when batch audit dropped events
            "audited_share": median(
                min(r["audited"] / r["requests"], 1.0) if r["audited"] is not None and r["requests"] else None
                for r in t.values()),
            "oneconn_p50_us": median(r["p50_us"] for r in o.values()),
            "oneconn_p99_us": median(r["p99_us"] for r in o.values()),
            "oneconn_rps": median(r["rps"] for r in o.values()),
            "openloop_p50_us": median(r["p50_us"] for r in q.values()),
            "openloop_p99_us": median(r["p99_us"] for r in q.values()),
            "openloop_rps": median(r["rps"] for r in q.values()),
            "errors": int(sum((r["non2xx"] or 0) + (r["socket_errors"] or 0)
                              for table in (t, o, q) for r in table.values())),
            "rps_x_nginx": per_round_ratio(throughput, target, "nginx", "rps"),
            "rps_x_direct": per_round_ratio(throughput, target, "direct", "rps"),
            "rps_x_nginx_lua": per_round_ratio(throughput, target, "nginx-lua", "rps"),
            "cpu_x_nginx": per_round_ratio(throughput, target, "nginx", "cpu_us_per_req"),
            "cpu_x_direct": per_round_ratio(throughput, target, "direct", "cpu_us_per_req"),
            "cpu_x_nginx_lua": per_round_ratio(throughput, target, "nginx-lua", "cpu_us_per_req"),
            "cpu_budget_x_nginx": per_round_inverse(throughput, target, "nginx", "cpu_us_per_req"),
            "oneconn_p50_minus_nginx_us": per_round_ratio(oneconn, target, "nginx", "p50_us", "sub"),
            "oneconn_p50_minus_direct_us": per_round_ratio(oneconn, target, "direct", "p50_us", "sub"),
        }
        if target == "wasmgate-full-pooled-many-users":
            # against nginx + Lua given the same 10,000 users and mix
            entry["rps_x_nginx_lua_many_users"] = per_round_ratio(throughput, target, "nginx-lua-many-users", "rps")
            entry["cpu_x_nginx_lua_many_users"] = per_round_ratio(
                throughput, target, "nginx-lua-many-users", "cpu_us_per_req")
        if target == "wasmgate-pass-tls":
            entry["rps_x_nginx_tls"] = per_round_ratio(throughput, target, "nginx-tls", "rps")
            entry["cpu_x_nginx_tls"] = per_round_ratio(throughput, target, "nginx-tls", "cpu_us_per_req")
        summary[target] = entry
    return summary


def checks(summary):
    """The issue's targets, as hit/missed with the measured figure."""
    results = []

    def check(name, target, key, op, goal, unit=""):
        entry = summary.get(target)
        value = entry.get(key) if entry else None
        if value is None:
            results.append({"target": name, "value": None, "goal": f"{op} {goal}{unit}", "hit": None})
            return
        hit = value >= goal if op == ">=" else value <= goal if op == "<=" else value > goal
        results.append({"target": name, "value": round(value, 3), "goal": f"{op} {goal}{unit}", "hit": hit})

    # issue 13's targets (the caches, the batches, fewer values lowered)
    # Each req/s goal twice: as measured, and as the CPU budget it means on
    # one saturated core (nginx's CPU per request over the target's), which
    # holds when a neighbour takes CPU 0 from one target's windows.
    for name, target, goal in [
            ("full chain pooled, caches on, req/s vs nginx (cache-helped)", "wasmgate-full-pooled", 0.70),
            ("full chain pooled, no cache, req/s vs nginx", "wasmgate-full-pooled-nocache", 0.55),
            ("full chain per-request, caches on, req/s vs nginx (cache-helped)", "wasmgate-full-per-request", 0.55),
            ("pass-through req/s vs nginx", "wasmgate-pass", 0.78)]:
        check(name, target, "rps_x_nginx", ">=", goal, "x")
        check(name.replace("req/s", "by CPU (nginx's ÷ its own)"), target, "cpu_budget_x_nginx", ">=", goal, "x")
    check("full chain pooled, caches on, CPU/req vs nginx + Lua (cache-helped)", "wasmgate-full-pooled", "cpu_x_nginx_lua", "<=", 1.3, "x")
    check("pass-through one-connection p50 minus nginx's", "wasmgate-pass", "oneconn_p50_minus_nginx_us", "<=", 5, " us")
    return results


def fmt(value, digits=0, suffix=""):
    if value is None:
        return "–"
    if digits == 0:
        return f"{value:,.0f}{suffix}"
    return f"{value:,.{digits}f}{suffix}"


def signed(value):
    return "–" if value is None else f"{value:+.0f}"


def markdown(summary, meta, results):
    lines = []
    lines.append("| target | req/s | × nginx | × direct | CPU µs/req | CPU × nginx | cache hits | minor faults/req | 1-conn p50 µs | 1-conn p99 µs | p50 − nginx µs | open-loop p50 µs | open-loop p99 µs | errors | audited |")
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for target, e in summary.items():
        lines.append("| " + " | ".join([
            f"`{target}`",
            fmt(e["rps"]),
            fmt(e["rps_x_nginx"], 2),
            fmt(e["rps_x_direct"], 2),
            fmt(e["cpu_us_per_req"], 1),
            fmt(e["cpu_x_nginx"], 2),
            "–" if e.get("cache_hit_pct") is None else f"{e['cache_hit_pct']:.1f}%",
            fmt(e.get("minflt_per_req"), 2),
            fmt(e["oneconn_p50_us"]),
            fmt(e["oneconn_p99_us"]),
            signed(e["oneconn_p50_minus_nginx_us"]),
            fmt(e["openloop_p50_us"]),
            fmt(e["openloop_p99_us"]),
            str(e["errors"]),
            "–" if e["audited_share"] is None else f"{e['audited_share'] * 100:.0f}%",
        ]) + " |")
    lines.append("")
    s = meta.get("settings", {})
    lines.append(
        f"Medians over {s.get('rounds')} rounds (ratios computed per round, then the median); "
        f"req/s and CPU: wrk, 1 thread, {s.get('connections')} connections, {s.get('duration_s')} s after "
        f"{s.get('warmup_s')} s of warm-up, the 80/20 read/write mix of `bench/wrk/mix.lua`; 1-conn: wrk, one "
        f"connection, target + upstream + wrk on CPU 0; open loop: oha at {s.get('openloop_rate')} req/s, "
        f"{s.get('openloop_connections')} connections, latency correction, GET only. "
        f"audited: the share of the throughput window's requests whose completion reached the audit file "
        f"(nginx + Lua: its access log); below 100% when the batch audit queue overflowed and dropped events. "
        + (f"TLS rows: compare `wasmgate-pass-tls` with `nginx-tls` (× nginx-tls: req/s "
           f"{fmt(summary['wasmgate-pass-tls'].get('rps_x_nginx_tls'), 2)}, CPU "
           f"{fmt(summary['wasmgate-pass-tls'].get('cpu_x_nginx_tls'), 2)})."
           if "wasmgate-pass-tls" in summary and "nginx-tls" in summary else ""))
    lines.append("")
    extra = []
    for target, e in summary.items():
        bits = [f"req/s range {fmt(e['rps_min'])}–{fmt(e['rps_max'])}",
                f"CPU {fmt(e.get('user_cpu_us_per_req'), 1)} µs/req in user space, "
                f"{fmt(kernel_part(e), 1)} in the kernel",
                f"upstream CPU {fmt(e['upstream_cpu_us_per_req'], 1)} µs/req",
                f"{fmt(e['syscalls_per_req'], 2)} vfs read/write calls and {fmt(e['ctxsw_per_req'], 3)} context switches per request "
                f"({fmt(e.get('preempted_per_req'), 3)} of them involuntary)",
                f"other processes on CPU 0 {fmt(e['cpu0_other_pct'], 1)}%, stolen {fmt(e['cpu0_steal_pct'], 1)}%",
                f"major faults {fmt(e.get('majflt_per_req'), 4)}/req"]
        if any(ns is not None for ns in e.get("shared_cache_rounds", [])):
            bits.append("a load beyond the core's L2 (4 MiB chase) before each round: "
                        + ", ".join(f"{fmt(ns, 0)} ns" for ns in e["shared_cache_rounds"]))
        if target in meta.get("compiled_code", {}):
            bits.append(f"compiled code at start: {meta['compiled_code'][target] or 'none'}")
        if e.get("cache_detail"):
            bits.append(f"cache hits per filter and round: {e['cache_detail']}")
        if e.get("cpu_x_nginx_lua_many_users") is not None:
            bits.append(f"against `nginx-lua-many-users` (the same users and mix): CPU "
                        f"{fmt(e['cpu_x_nginx_lua_many_users'], 2)}×, req/s {fmt(e['rps_x_nginx_lua_many_users'], 2)}×")
        extra.append(f"- `{target}`: " + ", ".join(bits))
    lines.append("Per target (medians of the throughput runs): req/s range over rounds, the target's CPU per "
                 "request split into user space (utime: its own code, the libraries, JIT-compiled Wasm) and the "
                 "kernel (stime: loopback TCP, system calls, wake-ups), the upstream's CPU per "
                 "request, the target's vfs read- and write-class system calls (/proc/PID/io syscr + syscw: read, "
                 "write, readv, writev; socket send/recv calls are not counted there, so HAProxy shows 0) and context "
                 "switches (all threads) per request, of them the involuntary ones (the core given to a neighbour or "
                 "to another of its threads while it had work), and the CPU time of other processes on the target's core and "
                 "the share the hypervisor stole from it during the window (the machine is shared), the target's "
                 "major page faults per request, the time of one load beyond the core's own L2 just before each round "
                 "(`bench/probe.c`'s chase over 4 MiB: tens of ns when the shared L3 serves it, about 15 on the AMD "
                 "machines here and 35-39 on the Intel one of family 6, model 167, stepping 1, 140 and more when the machine's "
                 "neighbours leave it next to none of it and the load goes to memory), "
                 "and for wasmgate where its components' compiled code came from at "
                 "start (`compiled`: compiled then, the disk cache was cold; `disk`: read from it; `memory`) and its "
                 "decision caches' hit ratio per filter in each round. `cache hits` in the table: the hits of all "
                 "cached filters over their lookups in the window; every row with a figure there is cache-helped:")
    lines.append("")
    lines.extend(extra)
    lines.append("")
    lines.append("| issue's target | measured | goal | |")
    lines.append("| --- | ---: | ---: | --- |")
    for r in results:
        verdict = "not measured" if r["hit"] is None else ("hit" if r["hit"] else "**missed**")
        lines.append(f"| {r['target']} | {'–' if r['value'] is None else r['value']} | {r['goal']} | {verdict} |")
    lines.append("")
    m = meta.get("machine", {})
    load = meta.get("load", {})
    lines.append(f"- date: {meta.get('date')}; wasmgate {meta.get('versions', {}).get('wasmgate')}, "
                 f"binary: {meta.get('versions', {}).get('wasmgate_binary', 'cargo build --release')}")
    lines.append(f"- machine: {m.get('nproc')} CPUs, {m.get('cpu')}"
                 + (f" ({m['cpu_id']}; {m['caches']})" if m.get("cpu_id") else "")
                 + f", {m.get('memory')}, Linux {m.get('kernel')}"
                 + (f", transparent huge pages {m['transparent_hugepages']}" if m.get("transparent_hugepages") else "")
                 + (f", up {m['uptime_at_start_s'] / 60:.0f} min when the run began"
                    if m.get("uptime_at_start_s") is not None else "")
                 + (f"; the kernel's mitigations (they set what a system call costs): {m['mitigations']}"
                    if m.get("mitigations") else ""))
    probe = meta.get("probe") or {}
    for when in ("start", "end"):
        p = probe.get(when)
        if p:
            lines.append(f"- probe at the {when} (`bench/probe.c`, CPU 0, ns): an add {fmt(p['add_chain_ns'], 3)} "
                         f"({fmt(1 / p['add_chain_ns'], 2)} GHz as code sees it), eight independent adds "
                         f"{fmt(p['add_wide_ns'], 3)}; a dependent load over 32 KiB {fmt(p['chase_32k_ns'], 1)}, "
                         f"1 MiB {fmt(p['chase_1m_ns'], 1)}, 16 MiB {fmt(p['chase_16m_ns'], 0)}, 512 MiB "
                         f"{fmt(p['chase_512m_4k_pages_ns'], 0)} (4 KiB pages) and {fmt(p['chase_512m_2m_pages_ns'], 0)} "
                         f"(2 MiB pages); a first write to a page {fmt(p['first_touch_ns'], 0)}")
    v = meta.get("versions", {})
    lines.append(f"- tools: {v.get('nginx')}; {v.get('haproxy')}; {v.get('wrk')}; {v.get('oha')}")
    lines.append(f"- load average (1, 5, 15 min): before waiting {load.get('before_wait')}; {load.get('quiet_wait')}; "
                 f"at start {load.get('at_start')}; at end {load.get('at_end')}")
    lines.append(f"- command: `{meta.get('command')}`")
    if meta.get("results"):
        results = meta["results"]
        results = "bench/results/" + results.rsplit("/", 1)[-1] if "/bench/results/" in results else results
        lines.append(f"- files: `{results}.tsv` (medians), `{results}.json` (every round, the settings, this run's "
                     f"meta), `{results}.md` (this table); `{results}.profile.txt` when run with `--profile`")
    return "\n".join(lines) + "\n"


def kernel_part(entry):
    """The kernel's share of a target's CPU per request (stime), from the total and its user part."""
    total, user = entry.get("cpu_us_per_req"), entry.get("user_cpu_us_per_req")
    return None if total is None or user is None else total - user


def write_tsv(path, summary):
    keys = ["rps", "rps_x_nginx", "rps_x_direct", "rps_x_nginx_lua", "cpu_us_per_req", "cpu_x_nginx", "cpu_x_direct",
            "oneconn_p50_us", "oneconn_p99_us", "oneconn_p50_minus_nginx_us", "openloop_p50_us", "openloop_p99_us",
            "errors", "upstream_cpu_us_per_req", "cpu0_other_pct", "audited_share", "syscalls_per_req", "ctxsw_per_req", "cpu0_steal_pct",
            "minflt_per_req", "majflt_per_req", "cache_hit_pct", "cpu_x_nginx_lua", "rps_min", "rps_max", "rounds",
            "user_cpu_us_per_req", "preempted_per_req", "shared_cache_ns"]
    with open(path, "w") as out:
        out.write("target\t" + "\t".join(keys) + "\n")
        for target, e in summary.items():
            cells = []
            for key in keys:
                value = e.get(key)
                cells.append("" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value)))
            out.write(target + "\t" + "\t".join(cells) + "\n")


def update_readme(path, table):
    try:
        with open(path) as handle:
            text = handle.read()
    except FileNotFoundError:
        print(f"report: no {path}; table not inserted", file=sys.stderr)
        return
    start, end = text.find(BEGIN_MARK), text.find(END_MARK)
    if start < 0 or end < start:
        print(f"report: {path} has no results markers; table not inserted", file=sys.stderr)
        return
    text = text[: start + len(BEGIN_MARK)] + "\n\n" + table + "\n" + text[end:]
    with open(path, "w") as handle:
        handle.write(text)


RECEIVED = re.compile(r'"requestReceivedTimestamp":"([^"]+)"')
MSEC = re.compile(r'"msec":([0-9.]+)')


def audited(path, start, end):
    count = 0
    with open(path, errors="replace") as handle:
        for line in handle:
            if '"stage":"' in line:
                if '"stage":"ResponseComplete"' not in line:
                    continue
                match = RECEIVED.search(line)
                if not match:
                    continue
                stamp = datetime.datetime.fromisoformat(match.group(1).replace("Z", "+00:00")).timestamp()
            else:
                match = MSEC.search(line)
                if not match:
                    continue
                stamp = float(match.group(1))
            if start <= stamp <= end:
                count += 1
    return count


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    command, raw = argv[1], argv[2]
    if command == "audit":
        print(audited(raw, float(argv[3]), float(argv[4])))
        return 0
    rows = load(raw)
    summary = summarise(rows)
    if command == "slowest":
        print(int(min(e["rps"] for e in summary.values() if e["rps"])))
        return 0
    if command == "smoke":
        failures = []
        for row in rows:
            if (row["non2xx"] or 0) or (row["socket_errors"] or 0):
                failures.append(f"{row['target']} ({row['phase']}): {row['non2xx']:.0f} non-2xx/3xx answers, "
                                f"{row['socket_errors']:.0f} socket errors")
        loose = {"wasmgate-pass": 0.2, "wasmgate-full-pooled": 0.1, "direct": 0.5}
        for target, floor in loose.items():
            ratio = summary.get(target, {}).get("rps_x_nginx")
            if target in summary and (ratio is None or ratio < floor):
                failures.append(f"{target}: {ratio} x nginx's req/s, below the smoke floor {floor}")
        full = summary.get("wasmgate-full-pooled")
        if full is not None and not full["audited_share"]:
            failures.append("wasmgate-full-pooled wrote no audit event")
        for target, e in summary.items():
            print(f"smoke: {target}: {fmt(e['rps'])} req/s ({fmt(e['rps_x_nginx'], 2)} x nginx), "
                  f"{fmt(e['cpu_us_per_req'], 1)} us CPU/req, one-connection p50 {fmt(e['oneconn_p50_us'])} us, "
                  f"errors {e['errors']}")
        for failure in failures:
            print(f"smoke: FAILED: {failure}")
        print(f"smoke: {'FAILED' if failures else 'passed'}")
        return 1 if failures else 0
    if command == "full":
        meta_path, prefix = argv[3], argv[4]
        readme = next((a.split("=", 1)[1] for a in argv[5:] if a.startswith("--readme=")), None)
        with open(meta_path) as handle:
            meta = json.load(handle)
        meta = meta.get("meta", meta)
        meta["results"] = prefix
        results = checks(summary)
        table = markdown(summary, meta, results)
        write_tsv(prefix + ".tsv", summary)
        with open(prefix + ".json", "w") as out:
            json.dump({"meta": meta, "summary": summary, "checks": results,
                       "rounds": [{k: v for k, v in row.items() if v not in (None, "")} for row in rows]},
                      out, indent=1)
            out.write("\n")
        with open(prefix + ".md", "w") as out:
            out.write(table)
        if readme:
            update_readme(readme, table)
        print(table)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
