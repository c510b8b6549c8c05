"""METIS on one group's subgraph of GREM's seed window (Armada, Alg. 1 line 7), also when the
window holds far more connected components than METIS handles well (private to
:mod:`shoal.partition.grem`)."""

from __future__ import annotations

import numpy as np

from shoal.partition import _grem_kernels as K

__all__ = ["METIS_COMPONENTS", "bisect_group"]


#: Components of a window's group subgraph given to METIS together (the largest ones).
METIS_COMPONENTS = 2048


def bisect_group(xadj, adj, f0: float, seed: int) -> np.ndarray:
    """METIS sides (int8) of one group's window subgraph, side 0 taking ``f0`` of the nodes.

    A window of at most :data:`METIS_COMPONENTS` connected components is bisected by METIS as
    a whole. With more, METIS bisects the union of the largest ones and every other component
    goes whole (cutting none of its edges) to the side further below its share, largest
    first. Windows of a large sparse graph hold hundreds of thousands of components (the
    first 2 Mi edges of a 28M-node DC-SBM: 717,000, 603,000 of them 1-2 nodes), and METIS's
    initial bisection, which restarts its BFS from a random untouched node by a scan of all
    nodes each time it runs dry, ran for hours on such a window."""
    import pymetis

    def metis(xa, ad):
        _, parts = pymetis.part_graph(
            2,
            pymetis.CSRAdjacency(xa, ad),
            tpwgts=[f0, 1.0 - f0],
            options=pymetis.Options(seed=int(seed)),
        )
        return np.frombuffer(parts, dtype=np.int64).astype(np.int8)

    ms = xadj.shape[0] - 1
    lab = np.empty(ms, dtype=np.int64)
    ncomp = K.components(xadj, adj, lab)
    if ncomp <= METIS_COMPONENTS:
        return metis(xadj, adj)
    csize = np.bincount(lab, minlength=ncomp)
    done = np.zeros(ncomp, dtype=np.bool_)
    done[np.argsort(-csize, kind="stable")[:METIS_COMPONENTS]] = True
    sel = np.flatnonzero(done[lab])
    pos = np.full(ms, -1, dtype=np.int64)
    pos[sel] = np.arange(sel.shape[0])
    xa = np.empty(sel.shape[0] + 1, dtype=np.int64)
    ad = np.empty(int(xadj[sel + 1].sum() - xadj[sel].sum()), dtype=np.int64)
    m = K.group_csr(xadj, adj, sel, pos, xa, ad)
    del pos
    parts = np.empty(ms, dtype=np.int8)
    parts[sel] = metis(xa, ad[:m])
    del xa, ad
    load0 = int(np.count_nonzero(parts[sel] == 0))
    cside = K.component_sides(csize, done, load0, sel.shape[0] - load0, f0)
    rest = ~done[lab]
    parts[rest] = cside[lab[rest]]
    return parts
