#!/usr/bin/env python3
"""Summarises `GPU_DOT_TRACE=1` lines: for each product shape, the median of every numeric
field (phase times in ms, counts), over all the lines of that shape.

    tools/trace-summary.py trace.txt [SHAPE ...]     # e.g. 256x256x256

Reads the crate's trace lines, `gpu-dot trace: MxKxN key=value ...`; values may carry `ms`.
The pieces logged of the first up parcel and the last down parcel (`first_parcel=` and
`last_parcel=`, `who:claimed-done` in µs each) give each line's first claim and last finish
of that parcel, in ms (`first_parcel_claimed`, `first_parcel_done`, and so on).
"""
import re
import statistics
import sys
from collections import defaultdict


def main():
    path, shapes = sys.argv[1], set(sys.argv[2:])
    fields = defaultdict(lambda: defaultdict(list))
    counts = defaultdict(int)
    for line in open(path, errors="replace"):
        m = re.search(r"gpu-dot trace: (\d+x\d+x\d+) (.*)", line)
        if not m or (shapes and m.group(1) not in shapes):
            continue
        shape = m.group(1)
        counts[shape] += 1
        rest = m.group(2)
        for key, pieces in re.findall(r"(first_parcel|last_parcel)=(\S+)", rest):
            times = re.findall(r"\w+:([\d.]+)-([\d.]+)", pieces)
            if times:
                fields[shape][key + "_claimed"].append(min(float(c) for c, _ in times) / 1e3)
                fields[shape][key + "_done"].append(max(float(d) for _, d in times) / 1e3)
        rest = re.sub(r"(first_parcel|last_parcel)=\S+", "", rest)
        for key, value in re.findall(r"(\w+)=([-\d.]+)(?:ms)?", rest):
            try:
                fields[shape][key].append(float(value))
            except ValueError:
                pass
    for shape in sorted(fields, key=lambda s: [int(x) for x in s.split("x")]):
        parts = [f"{k}={statistics.median(v):.4g}" for k, v in fields[shape].items()]
        print(f"{shape} (n={counts[shape]}, medians): " + " ".join(parts))


if __name__ == "__main__":
    main()
