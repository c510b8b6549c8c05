"""The local launcher (shoal.launcher): torchrun's environment, failures, restarts, no torch."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shoal.launcher import launch, main

REPO = Path(__file__).resolve().parents[1]


def _worker(tmp_path: Path, body: str) -> list[str]:
    """A worker command running ``body`` (Python; ``out`` is ``tmp_path``, ``env`` os.environ)."""
    code = f"import json, os, sys, time\nout = {str(tmp_path)!r}\nenv = os.environ\n{body}"
    return [sys.executable, "-c", code]


def test_workers_get_torchruns_environment(tmp_path):
    body = (
        "keys = ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR',"
        " 'MASTER_PORT', 'TORCHELASTIC_RUN_ID', 'TORCHELASTIC_RESTART_COUNT', 'OMP_NUM_THREADS')\n"
        "open(f'{out}/{env[\"RANK\"]}.json', 'w').write(json.dumps({k: env.get(k) for k in keys}))"
    )
    assert launch(_worker(tmp_path, body), 3) == 0
    got = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(3)]
    assert [g["RANK"] for g in got] == ["0", "1", "2"] == [g["LOCAL_RANK"] for g in got]
    assert {g["WORLD_SIZE"] for g in got} == {"3"} == {g["LOCAL_WORLD_SIZE"] for g in got}
    assert {g["MASTER_ADDR"] for g in got} == {"127.0.0.1"}
    assert len({g["MASTER_PORT"] for g in got}) == 1 and int(got[0]["MASTER_PORT"]) > 0
    assert len({g["TORCHELASTIC_RUN_ID"] for g in got}) == 1
    assert {g["TORCHELASTIC_RESTART_COUNT"] for g in got} == {"0"}
    assert all(g["OMP_NUM_THREADS"] for g in got)


def test_a_failing_worker_stops_the_others(tmp_path, capsys):
    body = "sys.exit(3) if env['RANK'] == '1' else time.sleep(120)"
    t0 = time.monotonic()
    assert launch(_worker(tmp_path, body), 3) == 1
    assert time.monotonic() - t0 < 60  # the sleepers were stopped, not waited for
    assert "rank 1 exited with code 3" in capsys.readouterr().err


def test_a_killed_worker_is_named_with_its_signal(tmp_path, capsys):
    body = "import signal\nos.kill(os.getpid(), signal.SIGKILL) if env['RANK'] == '0' else None"
    assert launch(_worker(tmp_path, body), 2) == 1
    err = capsys.readouterr().err
    assert "rank 0 was killed by SIGKILL" in err and "out of memory?" in err


def test_restarts_start_every_worker_again(tmp_path, capsys):
    body = (
        "n = env['TORCHELASTIC_RESTART_COUNT']\n"
        "open(f'{out}/{env[\"RANK\"]}-{n}', 'w').close()\n"
        "sys.exit(1 if env['RANK'] == '1' and n == '0' else 0)"
    )
    assert launch(_worker(tmp_path, body), 2, max_restarts=2) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0-0", "0-1", "1-0", "1-1"]
    assert "restarting the 2 workers (2 restart(s) left)" in capsys.readouterr().err


def test_restarts_run_out(tmp_path, capsys):
    assert launch(_worker(tmp_path, "sys.exit(2)"), 2, max_restarts=1) == 1
    err = capsys.readouterr().err
    assert err.count("restarting") == 1 and "distributed training failed" in err


def test_main_removes_the_spec_directory_and_checks_its_arguments(tmp_path):
    spec = tmp_path / "spec"
    spec.mkdir()
    (spec / "spec.json").write_text("{}")
    assert main(["--nproc", "1", "--remove", str(spec), "--", *_worker(tmp_path, "")]) == 0
    assert not spec.exists()
    with pytest.raises(SystemExit):
        main(["--nproc", "0", "--", sys.executable, "-c", ""])
    with pytest.raises(SystemExit):
        main(["--nproc", "2"])


def test_the_launcher_imports_neither_torch_nor_numpy():
    """Its process's memory stays with the workers (module docstring)."""
    code = "import sys, shoal.launcher; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"
