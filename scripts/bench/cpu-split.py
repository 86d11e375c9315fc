#!/usr/bin/env python3
"""CPU time by process group, for the benchmark scripts: where a machine's
cores went during a run (docs/benchmarks.md, "Where a single-event intake's
time goes").

  cpu-split.py snapshot FILE        write every process's CPU time so far
  cpu-split.py report FILE [PID NAME [EVENTS]]
                                    CPU used since FILE, by group, in cores;
                                    children PID waited for count as NAME;
                                    with EVENTS, also the CPU time each
                                    event cost PostgreSQL and the server

Groups are named by the process's command (`sluice`, `delivery_load`,
`postgres`, `redis-server`, …); the rest of the machine is `other` and the
idle share `idle`. A process that exited between the two readings counts
as `other`, unless its parent waited for it and is named by PID (the
benchmark's shell, for a loader it ran in the foreground).
"""
import json
import os
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
GROUPS = ("sluice", "delivery_load", "account_load", "postgres", "redis-server", "pgbench")


def processes():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command is in parentheses and may hold spaces.
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # utime and stime are fields 14 and 15 of the whole line.
        ticks = int(fields[11]) + int(fields[12])
        children = int(fields[13]) + int(fields[14])
        out[pid] = (comm, ticks, children)
    return out


def machine():
    with open("/proc/stat") as f:
        cpu = f.readline().split()[1:]
    total = sum(int(x) for x in cpu)
    idle = int(cpu[3]) + int(cpu[4])
    return total, idle


def snapshot(path):
    total, idle = machine()
    with open(path, "w") as f:
        json.dump({"procs": processes(), "total": total, "idle": idle, "at": time.time()}, f)


def report(path, waiter=None, waited_name=None, events=None):
    with open(path) as f:
        before = json.load(f)
    seconds = max(time.time() - before["at"], 1e-3)
    total, idle = machine()
    used = {}
    now = processes()
    if waiter in now and waiter in before["procs"]:
        used[waited_name] = now[waiter][2] - before["procs"][waiter][2]
    for pid, (comm, ticks, _) in now.items():
        prev = before["procs"].get(pid)
        start = prev[1] if prev and prev[0] == comm else 0
        # A build of the server under another name (sluice-base) is still it.
        group = next((g for g in GROUPS if comm == g or comm.startswith(g + "-")), "other")
        used[group] = used.get(group, 0) + (ticks - start)
    busy_other = (total - before["total"]) - (idle - before["idle"]) - sum(used.values())
    used["other"] = used.get("other", 0) + max(busy_other, 0)
    used["idle"] = idle - before["idle"]
    parts = [f"{g} {used[g] / TICK / seconds:.2f}" for g in sorted(used, key=lambda g: -used[g]) if used[g] > 0]
    print(f"cores used over {seconds:.1f} s: " + ", ".join(parts))
    if events:
        # CPU time per event is steadier than a rate on a busy machine:
        # compare builds by it (docs/benchmarks.md, "Listing indexes leave
        # out deliveries in flight").
        per = [f"{g} {used.get(g, 0) / TICK / int(events) * 1e6:.0f}" for g in ("postgres", "sluice")]
        print("CPU µs per event: " + ", ".join(per))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "snapshot":
        snapshot(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
    elif len(sys.argv) in (5, 6) and sys.argv[1] == "report":
        report(*sys.argv[2:])
    else:
        sys.exit(__doc__)
