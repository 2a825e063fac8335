#!/usr/bin/env python3
"""Groups a profile's self cost into buckets (standard library only).

    profile_summary.py perf REPORT REQUESTS      REPORT: `perf report --stdio --no-children
                                                 --sort dso,symbol -g none --percent-limit 0`
                                                 with `-n` (sample counts), cpu-clock at 999 Hz
    profile_summary.py callgrind SELF REQUESTS   SELF: `callgrind_annotate --threshold=100` output
    profile_summary.py cachesim TOTALS REQUESTS  TOTALS: `callgrind_annotate --auto=no` output
                                                 of a `--cache-sim=yes` run (every event)

Self cost is exact for both tools, unlike inclusive cost, which wasmtime's
fiber stack switches confuse (callgrind reports cycles above 100%, perf's
unwinder stops at the fiber boundary). Each symbol goes to the first bucket
whose pattern matches it; the table gives each bucket's share and its cost
per request (perf: CPU microseconds; callgrind: instructions).
"""

import re
import sys

SHA256 = "SHA-256 (the decision caches' keys)"

# (bucket, pattern on "dso symbol"), first match wins.
BUCKETS = [
    ("Wasm code (JIT-compiled filters)", r"\.cwasm|^\?\?\?:0x JIT|wasm\[\d+\]::function"),
    ("kernel: wake-ups and IRQ re-enable (sampled where interrupts come back on)",
     r"\[k\] (_raw_spin_unlock_irqrestore|_raw_spin_unlock_irq|try_to_wake_up|ttwu_|__wake_up)"),
    ("kernel: context switches and futexes", r"\[k\] (finish_task_switch|__schedule|schedule|futex|switch_mm|__switch_to|pick_next|dequeue|enqueue|update_curr|psi_)"),
    ("kernel: TCP/IP over loopback", r"\[k\] (tcp_|__tcp|ip_|__ip|inet|sk_|__sk|sock_|skb_|__skb|kfree_skb|consume_skb|__dev_queue|dev_|net_|__netif|netif|process_backlog|__napi|napi|loopback|bbr_|ipv4_|dst_|eth_type|netdev|xfrm|__xfrm|import_iovec|iovec_from_user|__import_iovec|validate_xmit|__alloc_skb|__kmalloc_node_track|kmalloc_reserve|lock_sock|release_sock|__release_sock|security_sock|__inet|_copy_to_iter|_copy_from_iter|copy_|skb_copy|__check_object|check_heap|__local_bh|do_softirq|handle_softirqs|raw_local|_raw_spin_lock_bh|__x64_sys_recvfrom|__sys_recvfrom|__sys_sendto|__x64_sys_sendto|sock|mem_cgroup_charge_skmem|mem_cgroup_uncharge_skmem|refill_stock|__mod_memcg|page_counter|bpf_skops|rb_)"),
    ("kernel: epoll", r"\[k\] (ep_|__ep|do_epoll|__x64_sys_epoll|epoll)"),
    ("kernel: file writes (audit sink)", r"\[k\] (ext4|vfs_write|new_sync_write|generic_perform_write|file_|iomap|filemap|__x64_sys_write|ksys_write|jbd2|__block|folio|xfs|btrfs|overlay|ovl_)"),
    ("kernel: other (syscall entry, timers, memory)", r"\[k\]"),
    ("libc: malloc/free", r"^(?=.*(libc\.so|/malloc/|malloc\.c|arena\.c))(?=.*(malloc|free|realloc|calloc|unlink_chunk|tcache|arena|memalign))"),
    ("libc: memcpy/memmove/memset", r"^(?=.*(libc\.so|multiarch|/string/))(?=.*(memmove|memcpy|memset|memcmp|bcmp|strlen))"),
    ("libc/vdso: syscall stubs, clock", r"(libc\.so|__vdso|\[vdso\]|ld-linux)"),
    ("wasmtime: component calls, lifting/lowering, instances", r"wasmtime|cranelift|wasmparser|wasm_encoder|wit_"),
    # Before wasmgate's: the caches' HMAC-SHA256 keys. Under valgrind it runs
    # in software (valgrind hides the CPU's SHA extensions), natively with
    # them where the CPU has them (`sha_ni` in /proc/cpuinfo).
    (SHA256, r"\bsha2::"),
    ("wasmgate's own functions", r"wasmgate"),
    ("serde/JSON", r"serde|json"),
    ("hyper/http parsing and I/O", r"hyper|httparse|\bhttp::|h2::|bytes::"),
    ("tokio/mio runtime", r"tokio|mio::"),
    ("rustls/ring (TLS)", r"\brustls|\bring::|ring_core"),
    ("nginx", r"\bngx_|nginx"),
    ("other user-space code (Rust std and crates, other libraries)", r"."),
]
MAIN_BINARIES = {"wasmgate"}
COMPILED = [(name, re.compile(pattern)) for name, pattern in BUCKETS]


def split_callgrind(rest):
    """'file:function [object]' -> 'function object' (object kept unless it is the main binary)."""
    match = re.match(r"^([^:]*):(.*?)(?: \[([^\]]*)\])?\s*$", rest)
    if not match:
        return rest
    source, function, obj = match.group(1), match.group(2), match.group(3) or ""
    obj = obj.rsplit("/", 1)[-1]
    if source == "???" and function.startswith("0x") and obj in ("", "???"):
        return "???:0x JIT"
    return function + ("" if obj in MAIN_BINARIES else " " + obj)


def split_perf(rest):
    """'dso [k] symbol' -> 'symbol dso' (dso kept unless it is the main binary)."""
    match = re.match(r"^(\S+)\s+(\[[k.]\])\s+(.*)$", rest)
    if not match:
        return rest
    dso, kind, symbol = match.groups()
    return f"{kind} {symbol}" + ("" if dso in MAIN_BINARIES else f" {dso}")


def classify(text):
    for name, pattern in COMPILED:
        if pattern.search(text):
            return name
    return "other user-space code (Rust std and crates, other libraries)"


def perf(path, requests):
    samples_total = None
    buckets = {}
    line_re = re.compile(r"^\s*([0-9.]+)%\s+(\d+)\s+(.*?)\s*$")
    with open(path, errors="replace") as handle:
        for line in handle:
            if line.startswith("# Samples:"):
                match = re.search(r"# Samples: (\d+)([KM]?)", line)
                if match:
                    scale = {"": 1, "K": 1000, "M": 1000000}[match.group(2)]
                    samples_total = int(match.group(1)) * scale
            if line.startswith("#") or not line.strip():
                continue
            match = line_re.match(line)
            if not match:
                continue
            samples = int(match.group(2))
            key = classify(split_perf(re.sub(r"\s+", " ", match.group(3))))
            buckets[key] = buckets.get(key, 0) + samples
    counted = sum(buckets.values())
    total = counted or samples_total or 1
    print(f"{total} cpu-clock samples at 999 Hz = {total / 999:.2f} s of CPU for {requests} requests "
          f"= {total / 999 / requests * 1e6:.1f} CPU us per request" if requests else f"{total} samples")
    print(f"{'share':>7}  {'us/req':>7}  bucket")
    for name, samples in sorted(buckets.items(), key=lambda item: -item[1]):
        per_request = samples / 999 / requests * 1e6 if requests else 0
        print(f"{samples * 100 / total:6.1f}%  {per_request:7.2f}  {name}")


def callgrind(path, requests):
    total = None
    buckets = {}
    line_re = re.compile(r"^\s*([0-9,]+)\s+\(\s*[0-9.]+%\)\s+(.*)$")
    in_list = seen = False
    with open(path, errors="replace") as handle:
        for line in handle:
            # the "Ir  file:function" list only, not the annotated source after it
            if re.match(r"^Ir\s+file:function", line):
                in_list = True
                continue
            if in_list and seen and (line.startswith("--") or "Auto-annotated source" in line):
                in_list = False
            if "PROGRAM TOTALS" not in line and not in_list:
                continue
            match = line_re.match(line)
            if not match:
                continue
            seen = seen or in_list
            cost = int(match.group(1).replace(",", ""))
            rest = match.group(2)
            if "PROGRAM TOTALS" in rest:
                total = cost
                continue
            key = classify(split_callgrind(rest))
            buckets[key] = buckets.get(key, 0) + cost
    counted = sum(buckets.values())
    total = total or counted
    print(f"{total:,} instructions for {requests} requests = {total / requests:,.0f} per request" if requests else f"{total:,}")
    print(f"{'share':>7}  {'Ir/req':>9}  bucket")
    for name, cost in sorted(buckets.items(), key=lambda item: -item[1]):
        print(f"{cost * 100 / total:6.1f}%  {cost / requests if requests else 0:9,.0f}  {name}")
    if counted < total * 0.97:
        print(f"({(total - counted) * 100 / total:.1f}% in functions below callgrind_annotate's threshold)")
    if buckets.get(SHA256) and requests:
        native = total - buckets[SHA256]
        print(f"({buckets[SHA256] / requests:,.0f} of them a request are SHA-256 in software: valgrind hides "
              f"the CPU's SHA extensions, which a native run uses where the CPU has them (sha_ni), at a "
              f"fraction of that; the rest come to {native / requests:,.0f} a request)")


# callgrind's cache events, as its `--cache-sim=yes` names them.
CACHE_EVENTS = {
    "I1mr": "L1 instruction misses",
    "D1mr": "L1 data read misses",
    "D1mw": "L1 data write misses",
    "ILmr": "last-level instruction misses",
    "DLmr": "last-level data read misses",
    "DLmw": "last-level data write misses",
}


def cachesim(path, requests):
    """The simulated caches' misses per request, and per thousand instructions."""
    events = totals = None
    with open(path, errors="replace") as handle:
        for line in handle:
            if line.startswith("Events recorded:"):
                events = line.split(":", 1)[1].split()
            elif "PROGRAM TOTALS" in line:
                totals = [int(n.replace(",", "")) for n in re.findall(r"([0-9][0-9,]*)\s+\(", line)]
                break
    if not events or not totals or len(events) != len(totals) or "Ir" not in events:
        print("(no cache simulation in this profile)")
        return
    counts = dict(zip(events, totals))
    print(f"{'per req':>9}  {'per 1k Ir':>9}  event")
    for event, name in CACHE_EVENTS.items():
        if event in counts:
            per_request = counts[event] / requests if requests else 0
            print(f"{per_request:9,.1f}  {counts[event] * 1000 / counts['Ir']:9.2f}  {name}")


def main(argv):
    modes = {"perf": perf, "callgrind": callgrind, "cachesim": cachesim}
    if len(argv) != 4 or argv[1] not in modes:
        print(__doc__, file=sys.stderr)
        return 2
    requests = int(float(argv[3] or 0))
    modes[argv[1]](argv[2], requests)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
