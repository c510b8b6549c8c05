"""``available()``: only an algorithm's optional packages may be missing; anything else is a
broken installation and must fail loudly instead of turning into skipped tests."""

from __future__ import annotations

import sys

import pytest

from shoal.partition.base import OPTIONAL_IMPORTS, REGISTRY, available


@pytest.fixture
def fake_module(tmp_path, monkeypatch):
    """``fake_module(name, source)``: an importable module ``name`` with ``source``."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(name: str, source: str) -> None:
        (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.delitem(sys.modules, name, raising=False)

    return make


def test_missing_hard_dependency_raises(fake_module, monkeypatch):
    fake_module("shoal_fake_algo", "import numpy_nonexistent\n\nclass Fake:\n    pass\n")
    monkeypatch.setitem(REGISTRY, "fake", "shoal_fake_algo:Fake")
    with pytest.raises(ModuleNotFoundError) as e:
        available()
    assert e.value.name == "numpy_nonexistent"


def test_missing_hard_dependency_of_an_optional_package_raises(fake_module, monkeypatch):
    # the optional package is installed but broken: not "not installed"
    fake_module("shoal_fake_opt", "import numpy_nonexistent\n")
    fake_module("shoal_fake_algo", "class Fake:\n    pass\n")
    monkeypatch.setitem(REGISTRY, "fake", "shoal_fake_algo:Fake")
    monkeypatch.setitem(OPTIONAL_IMPORTS, "fake", ("shoal_fake_opt",))
    with pytest.raises(ModuleNotFoundError) as e:
        available()
    assert e.value.name == "numpy_nonexistent"


def test_missing_optional_package_is_not_listed(monkeypatch):
    # None in sys.modules makes `import pymetis` raise ModuleNotFoundError(name="pymetis")
    monkeypatch.setitem(sys.modules, "pymetis", None)
    monkeypatch.setitem(sys.modules, "kaminpar", None)
    names = available()
    assert "metis" not in names and "kaminpar" not in names
    assert {"spring", "grem", "hdrf", "dbh", "hash", "random"} <= set(names)


def test_missing_optional_package_imported_by_the_module_is_not_listed(fake_module, monkeypatch):
    fake_module("shoal_fake_algo", "import shoal_fake_opt_absent\n\nclass Fake:\n    pass\n")
    monkeypatch.setitem(REGISTRY, "fake", "shoal_fake_algo:Fake")
    monkeypatch.setitem(OPTIONAL_IMPORTS, "fake", ("shoal_fake_opt_absent",))
    assert "fake" not in available()
    assert "spring" in available()


def test_every_optional_entry_is_a_registered_algorithm():
    assert set(OPTIONAL_IMPORTS) <= set(REGISTRY)
