#!/usr/bin/env python3
"""The table of scripts/serve-vs-peers: IOPS per device and job (median of the rounds,
then each round), and the ratios zblk is held to. Usage: serve-vs-peers.py DIR ROUNDS
"DEVICES" [JSON_OUT ["JOBS"]] (JOBS: those run, of w4k w512 w128k r4k; all by default)."""
import json
import os
import signal
import statistics
import sys

# A reader that stops early (`| head`) ends the script quietly, as it would `cat`.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def unwritable(kind, value, tb):
    """Results that cannot be written (a full disk) end the script with one line and
    status 1, not a traceback."""
    if issubclass(kind, OSError):
        print(f"serve-vs-peers: cannot write the results: {value}", file=sys.stderr)
        # What is left in the standard output's buffer cannot go anywhere either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    else:
        sys.__excepthook__(kind, value, tb)


sys.excepthook = unwritable

share, rounds, devices = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
json_out = sys.argv[4] if len(sys.argv) > 4 else ""
JOBS = [("w4k", "write", "4K randwrite psync QD1"), ("w512", "write", "512B randwrite psync QD1"),
        ("w128k", "write", "128K randwrite uring QD16 8 open"), ("r4k", "read", "4K randread uring QD16")]
if len(sys.argv) > 5:
    JOBS = [job for job in JOBS if job[0] in sys.argv[5].split()]
NAMES = {"nullb": "kernel null_blk (memory)", "zblk-mem": "zblk serve --dev nullb (memory)",
         "zblk-img": "zblk serve IMG (tmpfs)", "zblk-img-zwp": "zblk serve IMG (tmpfs) --policy zwp",
         "zblk-mem-poll": "zblk serve --dev nullb --poll 1000", "zblk-img-poll": "zblk serve IMG (tmpfs) --poll 1000",
         "zblk-mem-batch": "zblk serve --dev nullb --transport batch",
         "zblk-img-batch": "zblk serve IMG (tmpfs) --transport batch",
         "zblk-mem-command": "zblk serve --dev nullb --transport command",
         "zblk-img-command": "zblk serve IMG (tmpfs) --transport command",
         "rublk-ram": "rublk zoned, RAM",
         "rublk-ram-zc": "rublk zoned, RAM, zero copy (-z)",
         "rublk-null": "rublk null (no zones, no data)",
         "rublk-null-zc": "rublk null, zero copy (-z)",
         "rublk-file": "rublk zoned, file (tmpfs)"}


def iops(r, dev, job, rw):
    if os.path.exists(f"{share}/r{r}-{dev}-{job}.failed"):
        return None  # fio exited with an error: its JSON may still say 0 IOPS
    try:
        text = open(f"{share}/r{r}-{dev}-{job}.json").read()
        j = json.loads(text[text.index("{"):])["jobs"][0]
        return None if j["error"] else j[rw]["iops"]
    except (OSError, ValueError, KeyError, IndexError):
        return None


rows = {(d, j): [iops(r, d, j, rw) for r in range(1, rounds + 1)] for d in devices for j, rw, _ in JOBS}
med = {k: statistics.median([x for x in v if x is not None]) if any(x is not None for x in v) else None
       for k, v in rows.items()}


def fmt(x):
    return "failed" if x is None else f"{x:,.0f}"


def table_head(title, first):
    """A table's title, then its header: `first`, then a column per job."""
    print(title)
    print()
    print(f"| {first} | " + " | ".join(t for _, _, t in JOBS) + " |")
    print("|---|" + "---|" * len(JOBS))


table_head(f"IOPS in the emulated guest (QEMU TCG, one boot; median of {rounds} rounds, then each round)", "device")
for d in devices:
    cells = []
    for j, _, _ in JOBS:
        each = " / ".join(fmt(x) for x in rows[(d, j)])
        cells.append(f"**{fmt(med[(d, j)])}** ({each})" if rounds > 1 else fmt(med[(d, j)]))
    print(f"| {NAMES[d]} | " + " | ".join(cells) + " |")

TARGETS = [
    ("zblk-mem", "rublk-ram", ["w4k", "w128k", "r4k"], 1.0, "zblk memory / rublk RAM"),
    ("zblk-img", "zblk-mem", ["w4k", "w128k", "r4k"], 0.8, "zblk IMG / zblk memory"),
    ("zblk-img", "rublk-file", ["w4k", "w128k", "r4k"], 1.0, "zblk IMG / rublk file"),
    ("zblk-mem", "rublk-ram", ["w512"], 1.0, "512 B writes: zblk memory / rublk RAM"),
    ("zblk-mem", "nullb", ["r4k"], 0.9, "reads: zblk memory / null_blk"),
    ("rublk-ram", "nullb", ["r4k"], None, "reads: rublk RAM / null_blk (for reference)"),
    ("zblk-mem-poll", "rublk-ram", ["w4k", "w512", "w128k", "r4k"], 1.0, "polling: zblk memory / rublk RAM"),
    ("zblk-img-poll", "zblk-mem-poll", ["w4k", "w128k", "r4k"], 0.8, "polling: zblk IMG / zblk memory"),
    ("zblk-img-poll", "rublk-file", ["w4k", "w128k", "r4k"], 1.0, "polling: zblk IMG / rublk file"),
    ("zblk-mem-poll", "nullb", ["r4k"], 0.9, "polling: reads, zblk memory / null_blk"),
    ("zblk-mem-batch", "zblk-mem-command", ["w4k", "w512", "w128k", "r4k"], None,
     "batched commands / a command per request, zblk memory"),
    ("zblk-img-batch", "zblk-img-command", ["w4k", "w512", "w128k", "r4k"], None,
     "batched commands / a command per request, zblk IMG"),
    ("zblk-mem", "zblk-mem-command", ["w4k", "w512", "w128k", "r4k"], None,
     "the default transport / a command per request, zblk memory"),
    ("zblk-img", "zblk-img-command", ["w4k", "w512", "w128k", "r4k"], None,
     "the default transport / a command per request, zblk IMG"),
    ("zblk-img", "zblk-img-zwp", ["w4k", "w512", "w128k", "r4k"], None,
     "zblk IMG, its default (pipelining) / per-zone plugging"),
    ("zblk-mem", "rublk-ram-zc", ["w4k", "w512", "w128k", "r4k"], None, "zblk memory / rublk RAM with zero copy"),
    ("rublk-ram-zc", "rublk-ram", ["w4k", "w512", "w128k", "r4k"], None, "rublk RAM: zero copy / user copy"),
    ("rublk-null", "rublk-ram", ["w4k", "w512", "w128k", "r4k"], None,
     "the ceiling: rublk null (no zones, no data) / rublk RAM"),
    ("rublk-null-zc", "rublk-ram", ["w4k", "w512", "w128k", "r4k"], None,
     "the ceiling: rublk null, zero copy / rublk RAM"),
    ("rublk-null", "nullb", ["r4k"], None, "the ceiling: reads, rublk null / null_blk"),
    ("rublk-null-zc", "nullb", ["r4k"], None, "the ceiling: reads, rublk null, zero copy / null_blk"),
    ("zblk-mem", "rublk-null", ["w4k", "w512", "w128k", "r4k"], None, "zblk memory / rublk null"),
]
print()
print("| ratio (medians) | job | ratio | each round | target | met |")
print("|---|---|---|---|---|---|")
out = []
for a, b, jobs, target, title in TARGETS:
    if a not in devices or b not in devices:
        continue
    for j in jobs:
        if (a, j) not in med:
            continue
        x, y = med[(a, j)], med[(b, j)]
        r = x / y if x is not None and y else None
        each = [a_ / b_ if a_ is not None and b_ else None for a_, b_ in zip(rows[(a, j)], rows[(b, j)])]
        each_s = " / ".join("-" if e is None else f"{e:.2f}" for e in each)
        met = "" if target is None else ("yes" if r is not None and r >= target else "**no**")
        tgt = "" if target is None else f">= {target:.1f}"
        print(f"| {title} | {j} | {'-' if r is None else f'{r:.2f}'} | {each_s} | {tgt} | {met} |")
        out.append({"ratio": title, "job": j, "value": r, "each": each, "target": target})


def cpu(r, dev, job, rw):
    """The server's (user, system) CPU time per I/O of the job, in microseconds, from
    its clock ticks (10 ms) before and after; None without a server or a result."""
    try:
        text = open(f"{share}/r{r}-{dev}-{job}.json").read()
        ios = json.loads(text[text.index("{"):])["jobs"][0][rw]["total_ios"]
        (u0, s0), (u1, s1) = [[int(x) for x in line.split()]
                              for line in open(f"{share}/r{r}-{dev}-{job}.cpu").read().splitlines()]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return ((u1 - u0) * 10000 / ios, (s1 - s0) * 10000 / ios) if ios > 0 else None


cpus = {(d, j): [cpu(r, d, j, rw) for r in range(1, rounds + 1)] for d in devices for j, rw, _ in JOBS}
served = [d for d in devices if any(x is not None for j, _, _ in JOBS for x in cpus[(d, j)])]
cpu_out = []
if served:
    print()
    table_head("Server CPU per I/O, user + system, in microseconds (median of the rounds' user and system times):",
               "server")
    for d in served:
        cells = []
        for j, _, _ in JOBS:
            got = [x for x in cpus[(d, j)] if x is not None]
            if not got:
                cells.append("-")
                continue
            u, sy = statistics.median(x[0] for x in got), statistics.median(x[1] for x in got)
            cells.append(f"{u:.1f} + {sy:.1f}")
            cpu_out.append({"device": d, "job": j, "user_us": u, "system_us": sy, "each": cpus[(d, j)]})
        print(f"| {NAMES[d]} | " + " | ".join(cells) + " |")
if json_out:
    with open(json_out, "w") as f:
        json.dump({"rounds": rounds, "iops": [{"device": d, "job": j, "each": rows[(d, j)], "median": med[(d, j)]}
                                              for d in devices for j, _, _ in JOBS], "ratios": out,
                   "server_cpu_per_io": cpu_out}, f, indent=1)
