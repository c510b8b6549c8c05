"""Importers: every source layout gives the same graph directory for the same graph."""

import gzip

import numpy as np
import pytest
import scipy.sparse as sp

from shoal.data.format import GraphDir
from shoal.data.importers import (
    ImportConfig,
    detect_format,
    from_pyg,
    from_scipy,
    import_graph,
)
from shoal.errors import ShoalInputError

EDGES = np.array([[0, 1], [1, 2], [2, 0], [3, 1], [1, 0]])


def edges_of(g: GraphDir) -> list[list[int]]:
    return g.edge_stream().memmap().tolist()


def write_text(path, text, gz=False):
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text",
    [
        "0 1\n1 2\n2 0\n3 1\n1 0\n",
        "# comment\n% another\n\n0\t1\n1 2\n2   0\n3 \t 1\n1 0  \n",  # runs of blanks
        "0,1\n1,2\n2,0\n3,1\n1,0\n",
        "0;1\n1;2\n2;0\n3;1\n1;0",
        "0 1\n1 2.0\n2 0\n3 1\n1 0\n",  # integral floats are accepted
    ],
)
def test_text_variants(tmp_path, text):
    src = write_text(tmp_path / "e.txt", text)
    g = import_graph(src, tmp_path / "g")
    assert edges_of(g) == EDGES.tolist()
    assert g.num_nodes == 4 and g.directed
    assert g.meta["source"]["importer"] == "text"


@pytest.mark.parametrize(
    "text", ["0 1\n1 2\n2 0\n3 1 0.5\n1 0\n", "0,1,7\n1,2,7\n2,0,7\n3,1,7\n1,0,7\n"]
)
def test_text_extra_columns_only_when_asked(tmp_path, text):
    src = write_text(tmp_path / "e.txt", text)
    with pytest.raises(ShoalInputError, match="line [14]: 3 columns") as e:
        import_graph(src, tmp_path / "g")
    assert "--ignore-extra-columns" in e.value.fix and not (tmp_path / "g").exists()
    g = import_graph(src, tmp_path / "g", ImportConfig(extra_columns="ignore"))
    assert edges_of(g) == EDGES.tolist()
    assert g.meta["source"]["options"]["extra_columns"] == "ignore"


def test_text_extra_column_deep_in_a_block(tmp_path):
    lines = [f"{i} {i + 1}" for i in range(3000)]
    lines[2345] += " 1.0"
    src = write_text(tmp_path / "e.txt", "\n".join(lines))
    with pytest.raises(ShoalInputError, match="line 2346: 3 columns"):
        import_graph(src, tmp_path / "g")


def test_text_gz_and_chunking(tmp_path):
    rng = np.random.default_rng(1)
    e = rng.integers(0, 500, size=(5000, 2))
    src = write_text(tmp_path / "e.csv.gz", "\n".join(f"{a},{b}" for a, b in e), gz=True)
    g = import_graph(src, tmp_path / "g", ImportConfig(chunk_edges=777))
    assert np.array_equal(g.edge_stream().memmap(), e)
    assert g.num_nodes == e.max() + 1


def test_text_options(tmp_path):
    src = write_text(tmp_path / "e.txt", "0 1\n1 0\n1 1\n2 1\n0 1\n")
    cfg = ImportConfig(num_nodes=5, undirected=True, dedup=True, drop_self_loops=True)
    g = import_graph(src, tmp_path / "g", cfg)
    assert g.num_nodes == 5 and not g.directed
    assert edges_of(g) == [[0, 1], [1, 0], [1, 2], [2, 1]]
    assert g.meta["self_loops"] == 0 and g.meta["deduplicated"]


@pytest.mark.parametrize("layout", ["2xE", "Ex2", "2xE_fortran", "Ex2_fortran", "float"])
def test_npy_layouts(tmp_path, layout):
    a = {
        "2xE": EDGES.T.copy(),
        "Ex2": EDGES.copy(),
        "2xE_fortran": np.asfortranarray(EDGES.T),
        "Ex2_fortran": np.asfortranarray(EDGES),
        "float": EDGES.astype(np.float64),
    }[layout].astype(np.int32 if layout != "float" else np.float64)
    np.save(tmp_path / "e.npy", a)
    g = import_graph(tmp_path / "e.npy", tmp_path / "g", ImportConfig(chunk_edges=2))
    assert edges_of(g) == EDGES.tolist()


def test_npz_full(tmp_path):
    n = 4
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    ei = np.array([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    np.savez_compressed(
        tmp_path / "graph.npz",
        edge_index=ei,
        num_nodes=np.int64(5),  # node 4 isolated
        x=np.vstack([x, np.ones((1, 3), np.float32)]),
        y=np.array([0, 1, 2, 1, 0]),
        train_mask=np.array([1, 1, 0, 0, 0], bool),
        val_mask=np.array([0, 0, 1, 0, 0], bool),
        test_mask=np.array([0, 0, 0, 1, 1], bool),
    )
    g = import_graph(tmp_path, tmp_path / "g")  # a folder holding graph.npz
    assert g.num_nodes == n + 1 and g.num_edges == 6
    assert not g.directed  # every reverse present
    assert np.array_equal(g.features()[:4], x)
    assert g.labels().tolist() == [0, 1, 2, 1, 0] and g.num_classes == 3
    assert g.split("train").tolist() == [0, 1] and g.split("test").tolist() == [3, 4]
    g.verify()


def test_npz_csr_features_and_split_index(tmp_path):
    x = sp.random(6, 5, density=0.4, format="csr", random_state=0, dtype=np.float32)
    masks = np.zeros((3, 10, 6), bool)
    for k in range(10):
        masks[0, k, k % 6] = masks[1, k, (k + 1) % 6] = masks[2, k, (k + 2) % 6] = True
    np.savez(
        tmp_path / "g.npz",
        edge_index=np.array([[0, 1, 2], [1, 2, 3]]),
        num_nodes=6,
        x_data=x.data,
        x_indices=x.indices,
        x_indptr=x.indptr,
        x_shape=np.array(x.shape),
        y=np.arange(6) % 2,
        train_masks=masks[0],
        val_masks=masks[1],
        test_masks=masks[2],
    )
    g = import_graph(tmp_path / "g.npz", tmp_path / "a")
    assert g.directed  # reverses absent
    assert np.allclose(g.features(), x.toarray())
    assert g.split("train").tolist() == [0]  # split 0 by default
    g = import_graph(tmp_path / "g.npz", tmp_path / "b", ImportConfig(split_index=3))
    assert [g.split(s).tolist() for s in ("train", "val", "test")] == [[3], [4], [5]]


def make_ogb(root, *, edges="0,1\n1,2\n2,3\n3,0\n", n=4, feats=None, labels=None, split=True):
    raw = root / "raw"
    raw.mkdir(parents=True)
    write_text(raw / "edge.csv.gz", edges, gz=True)
    write_text(raw / "num-node-list.csv.gz", f"{n}\n", gz=True)
    if feats is None:
        feats = "\n".join(",".join(f"{i + j * 0.5}" for j in range(3)) for i in range(n))
    write_text(raw / "node-feat.csv.gz", feats, gz=True)
    if labels is None:
        labels = "\n".join(str(i % 2) for i in range(n - 1)) + "\nnan\n"
    write_text(raw / "node-label.csv.gz", labels, gz=True)
    if split:
        sd = root / "split" / "time"
        sd.mkdir(parents=True)
        write_text(sd / "train.csv.gz", "0\n1\n", gz=True)
        write_text(sd / "valid.csv.gz", "2\n", gz=True)
        write_text(sd / "test.csv.gz", "3\n", gz=True)
    return root


def test_ogb_layout(tmp_path):
    d = make_ogb(tmp_path / "ogbn_fake")
    assert detect_format(d) == "ogb"
    g = import_graph(d, tmp_path / "g")
    assert edges_of(g) == [[0, 1], [1, 2], [2, 3], [3, 0]]
    assert g.features().shape == (4, 3) and g.features()[2, 1] == pytest.approx(2.5)
    assert g.labels().tolist() == [0, 1, 0, -1] and g.num_classes == 2
    assert [g.split(s).tolist() for s in ("train", "val", "test")] == [[0, 1], [2], [3]]
    g2 = import_graph(d, tmp_path / "u", ImportConfig(undirected=True))
    assert g2.num_edges == 8 and not g2.directed


def test_from_pyg(tmp_path):
    import torch
    from torch_geometric.data import Data

    data = Data(
        edge_index=torch.tensor(EDGES.T),
        x=torch.randn(5, 2),
        y=torch.tensor([0, 1, 0, 1, 1]),
        train_mask=torch.tensor([True, False, False, False, False]),
        num_nodes=5,
    )
    g = from_pyg(data, tmp_path / "g")
    assert edges_of(g) == EDGES.tolist() and g.num_nodes == 5
    assert np.allclose(g.features(), data.x.numpy())
    assert g.split("train").tolist() == [0]


def test_from_scipy(tmp_path):
    m = sp.coo_matrix((np.ones(5), (EDGES[:, 0], EDGES[:, 1])), shape=(6, 6)).tocsr()
    g = from_scipy(m, tmp_path / "g", undirected=True, dedup=True)
    assert g.num_nodes == 6
    got = {tuple(e) for e in edges_of(g)}
    assert got == {(a, b) for a, b in EDGES} | {(b, a) for a, b in EDGES}


@pytest.mark.shared
def test_shared_cora(shared_data, tmp_path, run_cli):
    import json

    code, out, err = run_cli("data", "import", shared_data("cora"), "--out", tmp_path / "c")
    assert code == 0, err
    code, out, err = run_cli("data", "info", tmp_path / "c", "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["num_nodes"] == 2708 and info["num_edges"] == 10556
    assert info["features"]["shape"] == [2708, 1433]
    assert info["splits"] == {"train": 140, "val": 500, "test": 1000}
    assert info["directed"] is False and sum(info["labels"]["class_counts"]) == 2708


@pytest.mark.shared
def test_shared_csr_features_and_ten_splits(shared_data, tmp_path):
    g = import_graph(shared_data("citeseer"), tmp_path / "cs")
    assert g.features().shape == (3327, 3703)
    d = np.load(shared_data("citeseer"))
    x = sp.csr_matrix((d["x_data"], d["x_indices"], d["x_indptr"]), shape=tuple(d["x_shape"]))
    assert np.array_equal(np.asarray(g.features()[:50]), x[:50].toarray())
    g = import_graph(
        shared_data("chameleon_filtered"), tmp_path / "ch", ImportConfig(split_index=4)
    )
    d = np.load(shared_data("chameleon_filtered"))
    assert np.array_equal(g.split("val"), np.flatnonzero(d["val_masks"][4]))
    assert g.directed  # edges stored once


def test_import_cli_json_and_overwrite(run_cli, tmp_path):
    import json

    src = write_text(tmp_path / "e.txt", "0 1\n1 2\n")
    args = ("data", "import", src, "--out", tmp_path / "g", "--json", tmp_path / "s.json")
    code, out, err = run_cli(*args, "--num-nodes", "4", "--name", "tiny")
    assert code == 0, err and "imported" in out
    s = json.loads((tmp_path / "s.json").read_text())
    assert (s["num_nodes"], s["num_edges"], s["directed"]) == (4, 2, True)
    assert GraphDir.open(tmp_path / "g").name == "tiny"
    code, _, err = run_cli(*args, "--undirected", "--overwrite")
    assert code == 0, err
    assert GraphDir.open(tmp_path / "g").num_edges == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.txt", "g", "s.json"]
