"""Progress: a bar on a terminal, one summary line per long stage otherwise."""

from __future__ import annotations

import importlib

# the module (shoal.utils exports the function under the same name)
P = importlib.import_module("shoal.utils.progress")


def test_summary_line_when_stderr_is_not_a_terminal(capsys, monkeypatch):
    monkeypatch.delenv("SHOAL_QUIET", raising=False)
    monkeypatch.setattr(P, "SUMMARY_AFTER_S", 0.0)
    bar = P.progress(total=3, desc="store: edges", unit="edge")
    for _ in range(3):
        bar.update(1)
    bar.close()
    bar.close()  # closing twice prints once
    assert sum(1 for _ in P.progress(range(5), desc="metrics: cut", unit="chunk")) == 5
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("store: edges: 3 edge in ") and err[0].endswith(" edge/s)")
    assert err[1].startswith("metrics: cut: 5 chunk in ") and len(err) == 2


def test_no_line_for_short_stages_disabled_bars_or_quiet(capsys, monkeypatch):
    monkeypatch.delenv("SHOAL_QUIET", raising=False)
    with P.progress(total=2, desc="fast") as bar:  # shorter than SUMMARY_AFTER_S
        bar.update(2)
    monkeypatch.setattr(P, "SUMMARY_AFTER_S", 0.0)
    P.progress(total=1, desc="off", enable=False).close()
    monkeypatch.setenv("SHOAL_QUIET", "1")
    P.progress(total=1, desc="quiet").close()
    assert capsys.readouterr().err == ""
