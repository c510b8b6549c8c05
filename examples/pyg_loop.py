"""A plain PyG training loop on a shoal store: your model, shoal's sampler and feature store.

Builds a 2-part store of the bundled Cora graph (``shoal data import``, ``shoal partition``,
``shoal store build --halo-features``) under ``--work``, then trains PyG's own
``GraphSAGE`` with ``shoal.loader.NeighborLoader`` batches drawn from each part in turn
(``torch_geometric.data.Data``: ``x``, ``edge_index``, ``y``, ``n_id``, ``batch_size``,
``num_sampled_nodes``, ``num_sampled_edges``), and tests it with full neighbourhoods on the
graph directory. Run::

    python examples/pyg_loop.py --work /tmp/pyg-loop --epochs 20
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import torch
from torch.nn import functional as F
from torch_geometric.nn.models import GraphSAGE

from shoal.loader import NeighborLoader
from shoal.store import Store

CORA = Path(__file__).resolve().parents[1] / "src/shoal/data/datasets/cora/graph.npz"


def shoal(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "shoal", *args], check=True, stdout=subprocess.DEVNULL)


def build(work: Path) -> tuple[Path, Path]:
    graph, parts, store = work / "cora", work / "cora-parts", work / "cora-store"
    if not graph.exists():
        shoal("data", "import", str(CORA), "--out", str(graph))
    if not parts.exists():
        shoal("partition", str(graph), "--algo", "spring", "--parts", "2", "--out", str(parts))
    if not store.exists():
        shoal("store", "build", str(graph), str(parts), "--out", str(store), "--halo-features")
    return graph, store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="folder for the graph, parts and store")
    ap.add_argument("--epochs", type=int, default=20)
    args = ap.parse_args()
    graph, store_path = build(Path(args.work))
    torch.manual_seed(0)
    store = Store.open(store_path)
    loaders = [NeighborLoader(store.part(i), [10, 10], batch_size=32, seed=i)
               for i in range(store.num_parts)]  # fmt: skip
    model = GraphSAGE(store.feature_dim, 64, num_layers=2, out_channels=7, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for epoch in range(args.epochs):
        model.train()
        total = 0.0
        for loader in loaders:  # the parts in turn: every training node once per epoch
            for batch in loader:
                opt.zero_grad()
                out = model(batch.x, batch.edge_index)[: batch.batch_size]
                loss = F.cross_entropy(out, batch.y[: batch.batch_size])
                loss.backward()
                opt.step()
                total += float(loss) * batch.batch_size
        print(f"epoch {epoch + 1} loss {total / sum(len(ld.seeds) for ld in loaders):.4f}")
    model.eval()
    correct = seen = 0
    with torch.no_grad():
        for batch in NeighborLoader(graph, [-1, -1], input_nodes="test", batch_size=1000,
                                    shuffle=False):  # fmt: skip
            pred = model(batch.x, batch.edge_index)[: batch.batch_size].argmax(1)
            correct += int((pred == batch.y[: batch.batch_size]).sum())
            seen += batch.batch_size
    print(f"test accuracy {correct / seen:.4f}")


if __name__ == "__main__":
    main()
