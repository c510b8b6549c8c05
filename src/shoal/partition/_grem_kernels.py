"""numba kernels of GREM (:mod:`shoal.partition.grem`): window relabelling, the window CSR and
the greedy refinement of Armada Alg. 2 with node and (optionally) edge capacities.

Private to :mod:`shoal.partition`. Per-node arrays: ``grp`` int16 or int32 (group = first final
part of the node's range), ``side`` int8 (-1 unassigned, 0, 1), ``hdiff`` float32 (the
difference of the two history scores, see :func:`greedy_window`), ``deg`` int32/int64
in-degree (the edge weight of a node; zeros when edges are not balanced): 11 bytes per node
with int16 groups. The window's global -> local ids live in a fixed-size hash table, not an
(N,) array. Per group ``g`` and side ``s``: ``size``/``cap`` in nodes and ``esize``/``ecap``
in in-edges.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _slot(keys, v):
    """Linear-probing slot of node ``v`` in the open-addressing table ``keys`` (size a power
    of two, -1 = empty): where ``v`` is, or the empty slot where it would go."""
    mask = keys.shape[0] - 1
    h = (np.uint64(v) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)  # wraps mod 2**64
    i = np.int64(h) & mask
    while keys[i] >= 0 and keys[i] != v:
        i = (i + 1) & mask
    return i


@numba.njit(cache=True)
def window_local(edges, grp, kparts, keys, vals, nodes, ledges):
    """Relabel the window's intra-group edges (groups with k >= 2) to local ids, in order of
    first appearance: ``nodes[a]`` is local node ``a``, ``ledges[:m]`` the relabelled edges.
    The global -> local map is the hash table ``keys``/``vals`` (a fixed size, set by the
    window, instead of an (N,) array); it is emptied again by :func:`reset_loc`.
    Returns (m, nloc)."""
    nloc = 0
    m = 0
    for i in range(edges.shape[0]):
        u = edges[i, 0]
        v = edges[i, 1]
        if u == v:
            continue
        g = grp[u]
        if g != grp[v] or kparts[g] < 2:
            continue
        for j in range(2):
            x = u if j == 0 else v
            t = _slot(keys, x)
            if keys[t] < 0:
                keys[t] = x
                vals[t] = nloc
                nodes[nloc] = x
                nloc += 1
            ledges[m, j] = vals[t]
        m += 1
    return m, nloc


@numba.njit(cache=True)
def local_csr(ledges, m, nloc, indptr, indices):
    """Symmetric CSR of the relabelled window edges ``ledges[:m]`` (``indptr`` zeroed)."""
    for i in range(m):
        indptr[ledges[i, 0] + 1] += 1
        indptr[ledges[i, 1] + 1] += 1
    for i in range(nloc):
        indptr[i + 1] += indptr[i]
    fill = indptr[:nloc].copy()
    for i in range(m):
        a = ledges[i, 0]
        b = ledges[i, 1]
        indices[fill[a]] = b
        fill[a] += 1
        indices[fill[b]] = a
        fill[b] += 1


@numba.njit(cache=True)
def reset_loc(nodes, nloc, keys):
    """Empty the table: the keys of this window are cleared in reverse insertion order (each
    removal restores the table as it was before that insertion, so every probe chain still
    finds the keys inserted earlier)."""
    for a in range(nloc - 1, -1, -1):
        keys[_slot(keys, nodes[a])] = -1


@numba.njit(cache=True)
def fits(g, s, d, size, cap, esize, ecap):
    """Whether side ``s`` of group ``g`` has room for one more node of in-degree ``d``."""
    return size[g, s] < cap[g, s] and esize[g, s] + d <= ecap[g, s]


@numba.njit(cache=True)
def fallback(g, want, d, size, cap, esize, ecap):
    """The side for a node whose preferred side ``want`` is full (Alg. 2 ``assign``: the
    other side; with in-edge capacities, when neither side fits, the side whose in-edges
    would exceed their cap by the smaller fraction, among sides with node room)."""
    other = 1 - want
    if size[g, want] >= cap[g, want] or fits(g, other, d, size, cap, esize, ecap):
        return other
    if size[g, other] >= cap[g, other]:
        return want
    load_w = (esize[g, want] + d) / max(ecap[g, want], 1)
    load_o = (esize[g, other] + d) / max(ecap[g, other], 1)
    return other if load_o < load_w else want


@numba.njit(cache=True)
def group_csr(indptr, indices, members, pos, out_ptr, out_idx):
    """The subgraph of a local CSR induced by ``members`` (``pos[a]`` = index of local node
    ``a`` in ``members`` or -1), rows sorted and without repeated neighbours (METIS wants a
    simple graph). Returns the number of entries written to ``out_idx``."""
    k = 0
    out_ptr[0] = 0
    for r in range(members.shape[0]):
        a = members[r]
        start = k
        for j in range(indptr[a], indptr[a + 1]):
            b = pos[indices[j]]
            if b >= 0:
                out_idx[k] = b
                k += 1
        row = np.sort(out_idx[start:k])
        w = start
        for j in range(row.shape[0]):
            if j == 0 or row[j] != row[j - 1]:
                out_idx[w] = row[j]
                w += 1
        k = w
        out_ptr[r + 1] = k
    return k


@numba.njit(cache=True)
def place_seed(parts, nodes, grp, deg, side, size, cap, esize, ecap):
    """Alg. 1 line 7: put the METIS sides of ``nodes`` in place (the other side when full)."""
    for i in range(nodes.shape[0]):
        v = nodes[i]
        g = grp[v]
        s = parts[i]
        if not fits(g, s, deg[v], size, cap, esize, ecap):
            s = fallback(g, s, deg[v], size, cap, esize, ecap)
        side[v] = s
        size[g, s] += 1
        esize[g, s] += deg[v]


@numba.njit(cache=True)
def _weights(per_part, k):
    """Weights ``(w0, w1)`` of the two sides' scores: with ``per_part`` and an uneven split
    (``k`` odd) neighbours are compared per final part, ``c0 / k0`` against ``c1 / k1``,
    i.e. the sign of ``k1 * c0 - k0 * c1``; else ``c0 - c1``."""
    k0 = k // 2
    k1 = k - k0
    if per_part and k0 != k1:
        return float(k1), float(k0)
    return 1.0, 1.0


@numba.njit(cache=True)
def _paper_assign(g, x, d, room0, room1, size, cap, esize, ecap):
    """Alg. 2's ``assign`` for a node seen before: the side with more neighbours if it has
    room, else (a tie, or that side full) the side with more room (ties: side 0), so a node
    may move on a tie. Room counts the node itself where it is, as the paper's ``sizes``."""
    if x > 0 and fits(g, 0, d, size, cap, esize, ecap):
        return 0
    if x < 0 and fits(g, 1, d, size, cap, esize, ecap):
        return 1
    return 0 if room0 * cap[g, 1] >= room1 * cap[g, 0] else 1


@numba.njit(cache=True, inline="always")
def _side_counts(a, nodes, indptr, indices, side):
    """Alg. 2 ``cnt_nbrs``: local node ``a``'s window neighbours on side 0 and on side 1."""
    c0 = 0.0
    c1 = 0.0
    for j in range(indptr[a], indptr[a + 1]):
        s = side[nodes[indices[j]]]
        if s == 0:
            c0 += 1.0
        elif s == 1:
            c1 += 1.0
    return c0, c1


@numba.njit(cache=True)
def seed_history(nodes, nloc, indptr, indices, grp, kparts, side, hdiff, per_part):
    """Alg. 1 lines 9-10: after the seed, every node of the first window keeps its neighbour
    counts per side in that window (as ``hdiff = w0 * c0 - w1 * c1``), so its first
    refinement averages them in."""
    for a in range(nloc):
        v = nodes[a]
        c0, c1 = _side_counts(a, nodes, indptr, indices, side)
        w0, w1 = _weights(per_part, kparts[grp[v]])
        hdiff[v] = w0 * c0 - w1 * c1


# long: one loop over the window's nodes implementing Alg. 2 (cnt_nbrs, assign, fix_sizes)
@numba.njit(cache=True)
def greedy_window(nodes, nloc, indptr, indices, refine, use_hist, state, paper_assign=False):
    """Alg. 2 on one window (local CSR over ``nodes[:nloc]``); returns moves of old nodes.

    The two history scores of Alg. 1 line 2 (``nbr_counts``, averaged ``h <- (h + c) / 2``)
    are kept as one number per node, ``hdiff = w0 * h0 - w1 * h1`` (weights of
    :func:`_weights`, fixed for a group during a level): every decision of Alg. 2 compares
    the two scores (``s0 > s1``, ``s0 == s1``), and ``w0*s0 - w1*s1`` averages the same way,
    ``(hdiff + w0*c0 - w1*c1) / 2``, so the decisions are the paper's with 4 bytes per node
    instead of 8. A node has been seen (has a history) exactly when it has a side."""
    grp, kparts, side, hdiff, size, cap, deg, esize, ecap, per_part = state
    moved = 0
    for a in range(nloc):
        v = nodes[a]
        g = grp[v]
        d = deg[v]
        c0, c1 = _side_counts(a, nodes, indptr, indices, side)
        cur = side[v]
        w0, w1 = _weights(per_part, kparts[g])
        x = w0 * c0 - w1 * c1
        if cur >= 0 and use_hist:
            x = 0.5 * (hdiff[v] + x)
        hdiff[v] = x
        room0 = cap[g, 0] - size[g, 0]
        room1 = cap[g, 1] - size[g, 1]
        if cur < 0:
            if x > 0 or (x == 0 and room0 * cap[g, 1] >= room1 * cap[g, 0]):
                want = 0
            else:
                want = 1
            if not fits(g, want, d, size, cap, esize, ecap):
                want = fallback(g, want, d, size, cap, esize, ecap)
            side[v] = want
            size[g, want] += 1
            esize[g, want] += d
        elif refine:
            other = 1 - cur
            if paper_assign:
                new = _paper_assign(g, x, d, room0, room1, size, cap, esize, ecap)
                move = new == other and fits(g, other, d, size, cap, esize, ecap)
            else:
                gain = x if other == 0 else -x
                move = gain > 0 and fits(g, other, d, size, cap, esize, ecap)
            if move:
                side[v] = other
                size[g, cur] -= 1
                size[g, other] += 1
                esize[g, cur] -= d
                esize[g, other] += d
                moved += 1
    return moved


@numba.njit(cache=True)
def fill_unassigned(grp, kparts, side, size, cap, deg, esize, ecap):
    """Nodes that met no edge of their group: the side with more room (nodes, then edges)."""
    for v in range(grp.shape[0]):
        g = grp[v]
        if kparts[g] < 2 or side[v] >= 0:
            continue
        r0 = cap[g, 0] - size[g, 0]
        r1 = cap[g, 1] - size[g, 1]
        s = 0 if r0 * cap[g, 1] >= r1 * cap[g, 0] else 1
        d = deg[v]
        if not fits(g, s, d, size, cap, esize, ecap):
            s = fallback(g, s, d, size, cap, esize, ecap)
        side[v] = s
        size[g, s] += 1
        esize[g, s] += d


@numba.njit(cache=True)
def split(grp, kparts, side):
    for v in range(grp.shape[0]):
        g = grp[v]
        k = kparts[g]
        if k >= 2 and side[v] == 1:
            grp[v] = g + k // 2


@numba.njit(cache=True)
def in_degree_chunk(edges, deg):
    for i in range(edges.shape[0]):
        deg[edges[i, 1]] += 1


@numba.njit(cache=True)
def components(xadj, adj, lab):
    """Connected components of a symmetric CSR graph by BFS: ``lab`` (n,) gets every node's
    component id; returns the number of components."""
    n = xadj.shape[0] - 1
    lab[:] = -1
    queue = np.empty(n, dtype=np.int64)
    c = 0
    for s in range(n):
        if lab[s] >= 0:
            continue
        lab[s] = c
        queue[0] = s
        head = 0
        tail = 1
        while head < tail:
            v = queue[head]
            head += 1
            for j in range(xadj[v], xadj[v + 1]):
                u = adj[j]
                if lab[u] < 0:
                    lab[u] = c
                    queue[tail] = u
                    tail += 1
        c += 1
    return c


@numba.njit(cache=True)
def component_sides(csize, done, load0, load1, f0):
    """Sides of whole components (all but those marked in ``done``), largest first, each to
    the side further below its target share (``f0`` of the nodes on side 0) after taking it;
    ``load0/1`` are the nodes already on each side. Returns int8 (components,)."""
    side = np.zeros(csize.shape[0], dtype=np.int8)
    f1 = 1.0 - f0
    for c in np.argsort(-csize, kind="mergesort"):
        if done[c]:
            continue
        x = csize[c]
        if (load0 + x) * f1 <= (load1 + x) * f0:
            load0 += x
        else:
            side[c] = 1
            load1 += x
    return side


def level_caps(kparts, part_cap, gload, slack):
    """Capacities of both sides of every group split at this level. Nodes: a side holding
    ``k`` final parts gets ``k`` times the capacity of one part. In-edges (``gload`` = the
    in-degree sum of every group, None when edges are not balanced): a side holding ``k_s``
    of the group's ``k`` parts gets ``k_s / k`` of the group's load times ``slack`` (the
    per-level share of ``balance``, so that the slack of ``ceil(log2 p)`` levels compounds to
    ``balance``, as METIS's recursive bisection splits its imbalance tolerance over levels):
    an absolute cap would let a group end a level full, leaving its parts no room."""
    p = kparts.shape[0]
    active = np.flatnonzero(kparts >= 2)
    half = kparts[active] // 2
    cap = np.zeros((p, 2), dtype=np.int64)
    cap[active, 0] = half * part_cap
    cap[active, 1] = (kparts[active] - half) * part_cap
    esize = np.zeros((p, 2), dtype=np.int64)
    ecap = np.full((p, 2), np.iinfo(np.int64).max // 4)
    if gload is not None:
        share = gload[active] * slack / kparts[active]
        ecap[active, 0] = np.ceil(half * share).astype(np.int64)
        ecap[active, 1] = np.ceil((kparts[active] - half) * share).astype(np.int64)
    return active, cap, esize, ecap
