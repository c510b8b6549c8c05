"""Bad input at every importer: exit code 2, a message naming the file, the row/field and a
fix, and nothing left behind (no output directory, no ``.NAME.tmp-*`` sibling)."""

import gzip

import numpy as np
import pytest

from shoal.data.format import GraphDir
from tests.data.test_importers import make_ogb, write_text


def run_bad(run_cli, tmp_path, src, *extra, must=()):
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = run_cli("data", "import", src, "--out", tmp_path / "out", *extra)
    assert code == 2, (out, err)
    assert err.startswith("shoal: error: ")
    assert str(src) in err, err  # names the file
    assert "->" in err, err  # and a fix
    for m in must:
        assert m in err, err
    after = sorted(p.name for p in tmp_path.iterdir())
    assert after == before, f"left behind: {set(after) - set(before)}"
    return err


# ---------------------------------------------------------------- text
@pytest.mark.parametrize(
    "name, text, extra, must",
    [
        ("e.txt", "# header\n0 1\n\n2 -1\n", (), ("line 4", "negative")),
        ("e.txt", "0 1\n1 2\n2 7\n", ("--num-nodes", "5"), ("line 3", "7", "--num-nodes")),
        ("e.csv", "src,dst\n0,1\n", (), ("line 1", "'src'", "comment")),
        ("e.txt", "0 1\n1 2\n% c\n2 1.5\n", (), ("line 4, column 2", "'1.5'")),
        ("e.txt", "0 1\n5\n", (), ("line 2", "expected 2")),
        ("e.txt", "# nothing here\n\n", (), ("empty",)),
    ],
    ids=["negative", "out-of-range", "string", "fractional", "missing-column", "empty"],
)
def test_text_bad_row(run_cli, tmp_path, name, text, extra, must):
    run_bad(run_cli, tmp_path, write_text(tmp_path / name, text), *extra, must=must)


def test_text_third_column(run_cli, tmp_path):
    src = write_text(tmp_path / "e.txt", "0 1\n1 2\n# c\n2 0 17\n")
    run_bad(run_cli, tmp_path, src, must=("line 4", "3 columns", "--ignore-extra-columns"))
    out = tmp_path / "g"
    code, _, err = run_cli("data", "import", src, "--out", out, "--ignore-extra-columns")
    assert code == 0, err
    assert GraphDir.open(out).edge_stream().memmap().tolist() == [[0, 1], [1, 2], [2, 0]]


def test_truncated_gzip(run_cli, tmp_path):
    data = gzip.compress(("\n".join(f"{i} {i + 1}" for i in range(20000))).encode())
    src = tmp_path / "e.txt.gz"
    src.write_bytes(data[: len(data) // 2])
    run_bad(run_cli, tmp_path, src, must=("truncated",))


# ---------------------------------------------------------------- npy
def test_npy_truncated(run_cli, tmp_path):
    np.save(tmp_path / "e.npy", np.arange(200, dtype=np.int64).reshape(2, 100))
    p = tmp_path / "e.npy"
    p.write_bytes(p.read_bytes()[:-50])
    run_bad(run_cli, tmp_path, p, must=("truncated", "(2, 100)"))


@pytest.mark.parametrize(
    "a, must",
    [
        (np.array([[0, 1], [1, 2], [2, 0.5]]), ("edge 2", "not an integer")),
        (np.zeros((3, 4), np.int64), ("(3, 4)", "(2, E)")),
        (np.array([[0, 1, 2], [1, -2, 0]]), ("edge 1", "negative")),
        (np.array([["a", "b"], ["c", "d"], ["e", "f"]]), ("dtype",)),
    ],
    ids=["fractional-float", "wrong-shape", "negative", "string-dtype"],
)
def test_npy_bad_array(run_cli, tmp_path, a, must):
    np.save(tmp_path / "e.npy", a)
    run_bad(run_cli, tmp_path, tmp_path / "e.npy", must=must)


# ---------------------------------------------------------------- npz
def npz(tmp_path, **over):
    base = dict(
        edge_index=np.array([[0, 1, 2, 3], [1, 2, 3, 0]]),
        num_nodes=np.int64(4),
        x=np.ones((4, 2), np.float32),
        y=np.array([0, 1, 0, 1]),
        train_mask=np.array([1, 0, 0, 0], bool),
        val_mask=np.array([0, 1, 0, 0], bool),
        test_mask=np.array([0, 0, 1, 1], bool),
    )
    base.update(over)
    base = {k: v for k, v in base.items() if v is not None}
    p = tmp_path / "graph.npz"
    np.savez_compressed(p, **base)
    return p


def _x_with(row, col, value):
    x = np.ones((4, 2), np.float32)
    x[row, col] = value
    return x


@pytest.mark.parametrize(
    "over, extra, must",
    [
        ({"x": np.ones((3, 2), np.float32)}, (), ("'x'", "3 rows", "num_nodes=4")),
        ({"x": _x_with(2, 1, np.nan)}, (), ("row 2, column 1", "nan")),
        ({"x": _x_with(3, 0, np.inf)}, (), ("row 3, column 0", "inf")),
        ({"y": np.array([0, 1, 5, 1])}, ("--num-classes", "2"), ("'y'", "row 2", "label 5")),
        ({"y": np.array([0, -3, 0, 1])}, (), ("row 1", "-3")),
        ({"edge_index": np.array([[0, 1, 9], [1, 2, 3]])}, (), ("column 2", "9", "num_nodes=4")),
        ({"val_mask": np.array([1, 1, 0, 0], bool)}, (), ("overlap", "node 0", "disjoint")),
        ({"test_mask": np.array([0, 0, 1], bool)}, (), ("test_mask", "(3,)")),
        ({"edge_index": None, "ei": np.zeros((2, 2), np.int64)}, (), ("edge_index",)),
    ],
    ids=[
        "feature-rows",
        "nan-feature",
        "inf-feature",
        "label-out-of-range",
        "negative-label",
        "id-out-of-range",
        "overlapping-splits",
        "mask-wrong-length",
        "missing-edge-index",
    ],
)
def test_npz_bad_member(run_cli, tmp_path, over, extra, must):
    run_bad(run_cli, tmp_path, npz(tmp_path, **over), *extra, must=must)


def test_npz_truncated(run_cli, tmp_path):
    p = npz(tmp_path, x=np.random.default_rng(0).random((4, 500)).astype(np.float32))
    p.write_bytes(p.read_bytes()[:-400])
    run_bad(run_cli, tmp_path, p, must=("corrupt",))


def test_npz_split_index_out_of_range(run_cli, tmp_path):
    m = np.zeros((10, 4), bool)
    p = npz(tmp_path, train_masks=m, val_masks=m, test_masks=m)
    run_bad(run_cli, tmp_path, p, "--split-index", "12", must=("split-index 12", "[0, 10)"))


def test_npz_empty_graph(run_cli, tmp_path):
    absent = dict.fromkeys(["x", "y", "train_mask", "val_mask", "test_mask"])
    p = npz(tmp_path, edge_index=np.zeros((2, 0), np.int64), num_nodes=np.int64(0), **absent)
    run_bad(run_cli, tmp_path, p, must=("empty",))


# ---------------------------------------------------------------- OGB
def test_ogb_split_out_of_range(run_cli, tmp_path):
    d = make_ogb(tmp_path / "ogb")
    write_text(d / "split" / "time" / "test.csv.gz", "3\n4\n", gz=True)
    err = run_bad(run_cli, tmp_path, d, must=("test.csv.gz", "node id 4", "[0, 4)"))
    assert "row 1" in err


def test_ogb_split_overlap(run_cli, tmp_path):
    d = make_ogb(tmp_path / "ogb")
    write_text(d / "split" / "time" / "valid.csv.gz", "1\n2\n", gz=True)
    run_bad(run_cli, tmp_path, d, must=("overlap", "node 1"))


@pytest.mark.parametrize(
    "files, must",
    [
        ({"feats": "1,2\n3,4\n5,6\n"}, ("node-feat.csv.gz", "3 rows", "num_nodes=4")),
        ({"feats": "1,2\n3,4\n5,nan\n7,8\n"}, ("node-feat.csv.gz", "row 2, column 1")),
        ({"labels": "0\n1\nx\n1\n"}, ("node-label.csv.gz", "line 3", "'x'")),
        ({"edges": "0,1\n1,4\n"}, ("edge.csv.gz", "line 2", "num_nodes=4")),
    ],
    ids=["feature-rows", "feature-nan", "bad-label", "edge-out-of-range"],
)
def test_ogb_bad_file(run_cli, tmp_path, files, must):
    run_bad(run_cli, tmp_path, make_ogb(tmp_path / "ogb", **files), must=must)


def test_ogb_missing_edges(run_cli, tmp_path):
    d = make_ogb(tmp_path / "ogb")
    (d / "raw" / "edge.csv.gz").unlink()
    err = run_bad(run_cli, tmp_path, d, "--format", "ogb", must=("raw/edge.csv.gz",))
    assert "missing" in err


# ---------------------------------------------------------------- writer-level
def test_existing_output_untouched(run_cli, tmp_path):
    src = write_text(tmp_path / "e.txt", "0 1\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    code, _, err = run_cli("data", "import", src, "--out", tmp_path / "out")
    assert code == 2 and "--overwrite" in err
    assert (tmp_path / "out" / "keep").read_text() == "x"
