#!/usr/bin/env python3
"""Reads test database names on stdin and prints a DROP DATABASE statement for
each one older than argv[1] seconds. Names carry their creation time:
`sluice_t_<ulid>` (the ULID's first 10 characters are milliseconds since the
epoch, Crockford base32) or `sluice_e2e_<unix seconds>_<pid>`. A name whose
time cannot be read is left alone."""
import sys
import time

CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def created_at(name: str):
    if name.startswith("sluice_t_"):
        ms = 0
        for ch in name[len("sluice_t_"):][:10]:
            i = CROCKFORD.find(ch)
            if i < 0:
                return None
            ms = ms * 32 + i
        return ms / 1000
    if name.startswith("sluice_e2e_"):
        head = name[len("sluice_e2e_"):].split("_", 1)[0]
        return float(head) if head.isdigit() else None
    return None


def main() -> None:
    max_age = float(sys.argv[1])
    now = time.time()
    for line in sys.stdin:
        name = line.strip()
        t = created_at(name)
        if t is not None and now - t > max_age:
            print(f"DROP DATABASE IF EXISTS {name};")


main()
