"""Run a command inside a Linux cgroup-v1 memory group capped at a given size.

The implementation (and why every memory claim is tested under a real cap) is in
``bench/common.py``: ``Cgroup``, ``run_capped``, ``run_capped_each``, ``evict``, ``parse_size``,
re-exported here. This file is the command::

    python bench/cgroup.py --limit 4GiB [--json out.json] [--evict DIR] -- CMD ARGS...

prints (and writes with ``--json``) wall seconds, the exit code, the cgroup's peak usage,
failcnt and OOM kills, the peaks of its ``rss``, ``cache`` and ``dirty`` (sampled every
0.1 s), and the bytes the command read from and wrote to disk (``ru_inblock`` and
``ru_oublock`` of the child and its descendants, from ``wait4``). ``--evict DIR`` first
drops the page cache of every file under DIR (``posix_fadvise(DONTNEED)``), so the run starts
cold and its file pages are charged to its own group. ``--smoke`` runs ``true`` under a
64 MiB cap (uncapped, with a warning, where cgroup v1 is absent) and checks the result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from common import Cgroup, caps_available, evict, parse_size, run_capped, run_capped_each

__all__ = ["Cgroup", "evict", "main", "parse_size", "run_capped", "run_capped_each"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", help="memory cap, e.g. 4GiB ('none': no cap)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds (default none)")
    ap.add_argument("--evict", action="append", default=[], help="drop this path's page cache")
    ap.add_argument("--json", default=None, help="write the result here")
    ap.add_argument("--smoke", action="store_true", help="run `true` under a 64 MiB cap")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command and its arguments")
    a = ap.parse_args(argv)
    if a.smoke:
        limit = 64 << 20 if caps_available(smoke=True) else None
        res = run_capped(["true"], limit, name=f"cgroup_smoke_{os.getpid()}", timeout=60)
        cg = res.get("cgroup") or {}
        print(json.dumps(res, indent=1))
        if res["returncode"] != 0 or (limit and (cg.get("limit") != limit or cg["oom_kill"])):
            raise SystemExit("cgroup smoke run failed")
        return 0
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd or not a.limit:
        ap.error("give --limit and the command after --")
    limit = None if a.limit.lower() == "none" else parse_size(a.limit)
    res = run_capped(cmd, limit, timeout=a.timeout, evict_paths=a.evict)
    text = json.dumps(res, indent=1)
    print(text, file=sys.stderr)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0 if res["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
