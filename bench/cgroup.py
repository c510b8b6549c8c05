"""Run a command inside a Linux cgroup-v1 memory group capped at a given size.

Every memory claim of shoal's benchmarks is tested under a real cap, not read from RSS (which
counts the page cache of memory-mapped files and hides thrashing on an unlimited machine). The
group is a child of this process's own memory cgroup (so it stays inside any limit that
already applies), its limit covers the process *and its page cache*, and it is removed
afterwards. Needs root and cgroup v1 mounted at ``/sys/fs/cgroup/memory``.

As a module: ``with Cgroup("name", 4 << 30) as cg: ...`` and :func:`run_capped`.
As a command::

    python bench/cgroup.py --limit 4GiB [--json out.json] [--evict DIR] -- CMD ARGS...

prints (and writes with ``--json``) wall seconds, the exit code, the cgroup's peak usage,
failcnt and OOM kills, the peaks of its ``rss``, ``cache`` and ``dirty`` (sampled every 0.1 s), and the bytes the command read from and wrote to disk (``ru_inblock``
and ``ru_oublock`` of the child and its descendants, from ``wait4``). ``--evict DIR`` first
drops the page cache of every file under DIR (``posix_fadvise(DONTNEED)``), so the run starts
cold and its file pages are charged to its own group.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["Cgroup", "evict", "parse_size", "run_capped"]

BASE = Path("/sys/fs/cgroup/memory")


def parse_size(text: str) -> int:
    """``"4GiB"``, ``"4G"``, ``"512MB"``, ``"1000"`` -> bytes (K/M/G/T are powers of 1024)."""
    t = text.strip().upper().replace("IB", "").replace("B", "")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(float(t))


def evict(path: str | os.PathLike) -> None:
    """Drop the page cache of every file under ``path`` (or of ``path`` itself)."""
    p = Path(path)
    files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class Cgroup:
    """A cgroup-v1 memory group, child of this process's own memory cgroup."""

    def __init__(self, name: str, limit: int):
        own = "/"
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrl, path = line.split(":", 2)
            if "memory" in ctrl.split(","):
                own = path
        self.path = BASE / own.lstrip("/") / name
        self.limit = int(limit)

    def __enter__(self) -> Cgroup:
        if not BASE.is_dir():
            raise RuntimeError(f"cgroup v1 memory controller not mounted at {BASE}")
        if self.path.exists():
            self.path.rmdir()
        self.path.mkdir()
        try:
            (self.path / "memory.limit_in_bytes").write_text(str(self.limit))
            (self.path / "memory.memsw.limit_in_bytes").exists() and (
                self.path / "memory.memsw.limit_in_bytes"
            ).write_text(str(self.limit))
            self.limit = int((self.path / "memory.limit_in_bytes").read_text())  # page-rounded
        except BaseException:
            self.path.rmdir()
            raise
        return self

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def stat(self) -> dict[str, int]:
        """``memory.stat`` of the group (bytes: ``rss``, ``cache``, ``dirty``, ...)."""
        try:
            text = (self.path / "memory.stat").read_text()
        except OSError:
            return {}
        return {k: int(v) for k, v in (ln.split() for ln in text.splitlines() if ln.strip())}

    def read(self) -> dict:
        def get(name: str) -> str:
            try:
                return (self.path / name).read_text()
            except OSError:
                return ""

        oom = dict(ln.split() for ln in get("memory.oom_control").splitlines() if ln.strip())
        return {
            "cgroup": str(self.path),
            "limit": self.limit,
            "max_usage": int(get("memory.max_usage_in_bytes") or 0),
            "failcnt": int(get("memory.failcnt") or 0),
            "oom_kill": int(oom.get("oom_kill", -1)),
        }

    def __exit__(self, *exc: object) -> None:
        for i in range(100):  # wait until every process has left, then remove
            left = (self.path / "cgroup.procs").read_text().split()
            if not left:
                break
            if i == 50:  # stragglers (only processes started inside the group are here)
                for pid in left:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.2)
        try:
            self.path.rmdir()
        except OSError as e:
            print(f"warning: could not remove {self.path}: {e}", file=sys.stderr)


def run_capped(
    cmd: list[str],
    limit: int | None,
    *,
    name: str = "shoal_bench",
    timeout: float | None = None,
    evict_paths: list[str | os.PathLike] = (),
    **popen_kw,
) -> dict:
    """Run ``cmd`` in a fresh group capped at ``limit`` bytes (None: no group, no cap) and
    return ``{"seconds", "returncode", "timed_out", "read_bytes", "write_bytes",
    "maxrss_bytes", "cgroup": {...}}``. On timeout the whole group is killed."""
    for p in evict_paths:
        evict(p)
    cg = Cgroup(name, limit) if limit else None
    if cg is not None:
        cg.__enter__()
    try:
        path = cg.path if cg is not None else None

        def enter() -> None:  # runs in the child before exec
            os.setsid()
            if path is not None:
                (path / "cgroup.procs").write_text(str(os.getpid()))

        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, preexec_fn=enter, **popen_kw)
        timed_out = False
        deadline = None if timeout is None else t0 + timeout
        peak = {"rss": 0, "cache": 0, "dirty": 0, "rss+cache": 0}
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            st = cg.stat() if cg is not None else {}
            if st:
                for k in ("rss", "cache", "dirty"):
                    peak[k] = max(peak[k], st.get(k, 0))
                peak["rss+cache"] = max(peak["rss+cache"], st.get("rss", 0) + st.get("cache", 0))
            if deadline is not None and time.perf_counter() > deadline:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.1)
        secs = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        res = {
            "command": [str(c) for c in cmd],
            "seconds": secs,
            "returncode": proc.returncode,
            "timed_out": timed_out,
            "read_bytes": ru.ru_inblock * 512,
            "write_bytes": ru.ru_oublock * 512,
            "maxrss_bytes": ru.ru_maxrss * 1024,
        }
        if cg is not None:
            res["cgroup"] = {**cg.read(), "peak_sampled": peak}
        return res
    finally:
        if cg is not None:
            cg.__exit__(None, None, None)


def run_capped_each(
    cmds: list[tuple[list[str], dict]],
    limit: int | None,
    *,
    name: str = "shoal_bench",
    timeout: float | None = None,
    evict_paths: list[str | os.PathLike] = (),
    **popen_kw,
) -> list[dict]:
    """Run the commands ``(argv, extra environment)`` at once, each in its own group capped
    at ``limit`` bytes (None: uncapped), e.g. the ranks of a distributed run, each with its
    own cap. When one exits non-zero the others are killed. Returns one result per command,
    as :func:`run_capped`."""
    for p in evict_paths:
        evict(p)
    groups = [Cgroup(f"{name}_{i}", limit) if limit else None for i in range(len(cmds))]
    for g in groups:
        if g is not None:
            g.__enter__()
    procs: list = []
    try:
        t0 = time.perf_counter()
        for (cmd, env), g in zip(cmds, groups, strict=True):
            path = g.path if g is not None else None

            def enter(path=path) -> None:
                os.setsid()
                if path is not None:
                    (path / "cgroup.procs").write_text(str(os.getpid()))

            procs.append(
                subprocess.Popen(cmd, preexec_fn=enter, env={**os.environ, **env}, **popen_kw)
            )
        done: dict[int, tuple] = {}
        peaks = [{"rss": 0, "cache": 0, "dirty": 0, "rss+cache": 0} for _ in cmds]
        timed_out = False
        while len(done) < len(procs):
            for i, proc in enumerate(procs):
                if i in done:
                    continue
                pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    done[i] = (status, ru, time.perf_counter() - t0)
                    if os.waitstatus_to_exitcode(status) != 0:
                        for j, q in enumerate(procs):  # a failed rank: stop the others
                            if j not in done:
                                os.killpg(q.pid, signal.SIGKILL)
            for i, g in enumerate(groups):
                st = g.stat() if g is not None and i not in done else {}
                for k in ("rss", "cache", "dirty"):
                    peaks[i][k] = max(peaks[i][k], st.get(k, 0))
                tot = st.get("rss", 0) + st.get("cache", 0)
                peaks[i]["rss+cache"] = max(peaks[i]["rss+cache"], tot)
            if timeout is not None and time.perf_counter() - t0 > timeout and not timed_out:
                timed_out = True
                for j, q in enumerate(procs):
                    if j not in done:
                        os.killpg(q.pid, signal.SIGKILL)
            time.sleep(0.1)
        out = []
        for i, (cmd, env) in enumerate(cmds):
            status, ru, secs = done[i]
            res = {
                "command": [str(c) for c in cmd],
                "env": env,
                "seconds": secs,
                "returncode": os.waitstatus_to_exitcode(status),
                "timed_out": timed_out,
                "read_bytes": ru.ru_inblock * 512,
                "write_bytes": ru.ru_oublock * 512,
                "maxrss_bytes": ru.ru_maxrss * 1024,
            }
            if groups[i] is not None:
                res["cgroup"] = {**groups[i].read(), "peak_sampled": peaks[i]}
            out.append(res)
        return out
    finally:
        for g in groups:
            if g is not None:
                g.__exit__(None, None, None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", required=True, help="memory cap, e.g. 4GiB ('none': no cap)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds (default none)")
    ap.add_argument("--evict", action="append", default=[], help="drop this path's page cache")
    ap.add_argument("--json", default=None, help="write the result here")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command and its arguments")
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("give the command after --")
    limit = None if a.limit.lower() == "none" else parse_size(a.limit)
    res = run_capped(cmd, limit, timeout=a.timeout, evict_paths=a.evict)
    text = json.dumps(res, indent=1)
    print(text, file=sys.stderr)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0 if res["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
