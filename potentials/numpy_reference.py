"""Independent NumPy evaluator of Clebsch model files (the executable spec of the engine).

It evaluates per-atom energies from the exported file alone: no torch, e3nn, mace or nequip.
Matching the Python model to ~1e-12 in float64 proves that the file is complete, and the code
here is written to be read next to ``FORMAT.md`` by whoever implements the C++ engine. Forces
are not differentiated analytically here; :func:`finite_difference_forces` is provided for
checks.

Examples
--------
>>> # from potentials import write, numpy_reference as nr
>>> # model_json, tensors = write.read_model("potentials/bundled/cu-mace.safetensors")
>>> # out = nr.evaluate(model_json, tensors, positions, species, cell, pbc)
>>> # out["energy"]
"""

from __future__ import annotations

from math import factorial
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from .schema import check_version, irreps_offsets, parse_irreps

Tensors = Mapping[str, np.ndarray]


# ---------------------------------------------------------------------------------------------
# Geometry
# ---------------------------------------------------------------------------------------------


def neighbour_list(
    positions: np.ndarray, cell: Optional[np.ndarray], pbc: Sequence[bool], cutoff: float
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All ordered pairs (centre i, neighbour j, integer image shift S) with
    ``0 < |r_j + S @ cell - r_i| < cutoff``; the atom itself is excluded only at S = 0.

    Returns
    -------
    centre : (E,) int, neighbour : (E,) int, shift : (E, 3) int

    Examples
    --------
    >>> i, j, s = neighbour_list(np.array([[0., 0, 0], [1, 0, 0]]), None, [False] * 3, 1.5)
    >>> sorted(zip(i.tolist(), j.tolist()))
    [(0, 1), (1, 0)]
    """
    positions = np.asarray(positions, dtype=float)
    pbc = [bool(p) for p in pbc]
    if cell is None:
        cell = np.zeros((3, 3))
    cell = np.asarray(cell, dtype=float)
    reps = []
    for d in range(3):
        if not pbc[d]:
            reps.append(0)
            continue
        # distance between the lattice planes spanned by the two other vectors
        a, b = cell[(d + 1) % 3], cell[(d + 2) % 3]
        normal = np.cross(a, b)
        height = abs(np.dot(cell[d], normal)) / np.linalg.norm(normal)
        span = np.ptp(positions @ normal / np.linalg.norm(normal)) if len(positions) else 0.0
        reps.append(int(np.ceil((cutoff + span) / height)) + 1)
    shifts = np.array(
        [
            (a, b, c)
            for a in range(-reps[0], reps[0] + 1)
            for b in range(-reps[1], reps[1] + 1)
            for c in range(-reps[2], reps[2] + 1)
        ],
        dtype=np.int64,
    )
    centres, neighbours, images = [], [], []
    for s in shifts:
        off = s @ cell
        d = positions[None, :, :] + off[None, None, :] - positions[:, None, :]
        r = np.linalg.norm(d, axis=-1)
        mask = r < cutoff
        if not np.any(s):
            np.fill_diagonal(mask, False)
        i, j = np.nonzero(mask)
        centres.append(i)
        neighbours.append(j)
        images.append(np.repeat(s[None, :], len(i), axis=0))
    return (
        np.concatenate(centres),
        np.concatenate(neighbours),
        np.concatenate(images).reshape(-1, 3),
    )


def spherical_harmonics(lmax: int, vectors: np.ndarray) -> np.ndarray:
    """e3nn real spherical harmonics, ``normalize=True``, ``normalization='component'``.

    ``Y_l^m(v) = sqrt(4 pi) * Ylm_real(x'=v_z, y'=v_x, z'=v_y)`` where ``Ylm_real`` is the
    orthonormal real harmonic *without* the Condon-Shortley phase, ``m = -l..l`` in this
    order, and ``v`` is first divided by ``max(|v|, 1e-12)``. So ``sum_m Y_l^m(u)^2 = 2l+1``;
    ``Y_1 = sqrt(3) (x, y, z)``.

    Returns
    -------
    (E, (lmax+1)^2) float64

    Examples
    --------
    >>> y = spherical_harmonics(1, np.array([[0.0, 2.0, 0.0]]))
    >>> np.round(y, 12).tolist()
    [[1.0, 0.0, 1.732050807569, 0.0]]
    """
    v = np.asarray(vectors, dtype=float)
    n = np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)
    u = v / n
    xp, yp, zp = u[:, 2], u[:, 0], u[:, 1]
    e = len(u)
    # A_m + i B_m = (x' + i y')^m
    re = [np.ones(e)]
    im = [np.zeros(e)]
    for _ in range(lmax):
        re.append(re[-1] * xp - im[-1] * yp)
        im.append(re[-2] * yp + im[-1] * xp)
    # Q[l][m](z) = d^m P_l / dz^m, by the associated-Legendre recursion without (1-z^2)^(m/2)
    q = [[None] * (lmax + 1) for _ in range(lmax + 1)]
    for m in range(lmax + 1):
        dfact = 1.0
        for k in range(1, 2 * m, 2):
            dfact *= k
        q[m][m] = np.full(e, dfact)
        if m + 1 <= lmax:
            q[m + 1][m] = (2 * m + 1) * zp * q[m][m]
        for l in range(m + 2, lmax + 1):
            q[l][m] = ((2 * l - 1) * zp * q[l - 1][m] - (l + m - 1) * q[l - 2][m]) / (l - m)
    out = []
    for l in range(lmax + 1):
        for m in range(-l, l + 1):
            am = abs(m)
            norm = np.sqrt((2 * l + 1) * factorial(l - am) / factorial(l + am))
            if m > 0:
                out.append(np.sqrt(2.0) * norm * q[l][am] * re[am])
            elif m < 0:
                out.append(np.sqrt(2.0) * norm * q[l][am] * im[am])
            else:
                out.append(norm * q[l][0])
    return np.stack(out, axis=-1)


def polynomial_cutoff(r: np.ndarray, r_max, p) -> np.ndarray:
    """``1 - (p+1)(p+2)/2 t^p + p(p+2) t^(p+1) - p(p+1)/2 t^(p+2)`` for ``t = r/r_max < 1``.

    ``r_max`` may be an array (per edge).
    """
    t = r / r_max
    f = (
        1.0
        - ((p + 1.0) * (p + 2.0) / 2.0) * t**p
        + p * (p + 2.0) * t ** (p + 1)
        - (p * (p + 1.0) / 2) * t ** (p + 2)
    )
    return f * (r < r_max)


# ---------------------------------------------------------------------------------------------
# Operations (one per ``op`` of FORMAT.md)
# ---------------------------------------------------------------------------------------------


def _act(desc: Optional[Mapping[str, Any]], x: np.ndarray) -> np.ndarray:
    if desc is None:
        return x
    name = desc["name"]
    if name == "silu":
        y = x / (1.0 + np.exp(-x))
    elif name == "tanh":
        y = np.tanh(x)
    elif name == "sigmoid":
        y = 1.0 / (1.0 + np.exp(-x))
    elif name == "abs":
        y = np.abs(x)
    elif name == "ssp":
        y = np.logaddexp(0.0, x) - np.log(2.0)
    elif name == "gelu":
        from math import erf, sqrt

        y = 0.5 * x * (1.0 + np.vectorize(erf)(x / sqrt(2.0)))
    elif name == "mish":
        y = x * np.tanh(np.logaddexp(0.0, x))
    else:
        raise ValueError(f"unknown activation {name!r}")
    return desc["cst"] * y


def _blocks(irreps: str):
    items = parse_irreps(irreps)
    offsets = irreps_offsets(irreps)
    return items, offsets


def linear(desc: Mapping[str, Any], x: np.ndarray, t: Tensors) -> np.ndarray:
    """``linear`` op: ``y[i_out][w,m] += pw * sum_u W[off + u*mul_out + w] x[i_in][u,m]``."""
    items_in, off_in = _blocks(desc["irreps_in"])
    items_out, off_out = _blocks(desc["irreps_out"])
    n = x.shape[0]
    y = np.zeros((n, off_out[-1]))
    if desc["weight"] is None:
        return y if desc.get("bias") is None else y + t[desc["bias"]["tensor"]]
    w = t[desc["weight"]["tensor"]]
    for ins in desc["instructions"]:
        mi, mo = ins["path_shape"]
        mul_in, l_in, _ = items_in[ins["i_in"]]
        d = 2 * l_in + 1
        a = x[:, off_in[ins["i_in"]] : off_in[ins["i_in"]] + mul_in * d].reshape(n, mul_in, d)
        W = w[ins["weight_offset"] : ins["weight_offset"] + mi * mo].reshape(mi, mo)
        o = off_out[ins["i_out"]]
        y[:, o : o + mo * d] += ins["path_weight"] * np.einsum("uw,nui->nwi", W, a).reshape(n, -1)
    if desc.get("bias") is not None:
        y = y + t[desc["bias"]["tensor"]]
    return y


def tensor_product(
    desc: Mapping[str, Any],
    x1: np.ndarray,
    x2: np.ndarray,
    t: Tensors,
    weight: Optional[np.ndarray] = None,
) -> np.ndarray:
    """``tensor_product`` op. ``P = cg`` already includes the path weight.

    uvw: ``out[w,k] += sum_{u,v,i,j} W[u,v,w] P[i,j,k] x1[u,i] x2[v,j]``;
    uvu: ``out[u,k] += sum_{v,i,j} W[u,v] P[i,j,k] x1[u,i] x2[v,j]``;
    uuu: ``out[u,k] += sum_{i,j} W[u] P[i,j,k] x1[u,i] x2[u,j]``.
    Weights come from ``weight`` (per row, external) or the op's own tensor (shared).
    """
    items1, off1 = _blocks(desc["irreps_in1"])
    items2, off2 = _blocks(desc["irreps_in2"])
    items3, off3 = _blocks(desc["irreps_out"])
    n = x1.shape[0]
    out = np.zeros((n, off3[-1]))
    if desc["weight_source"] == "internal":
        wall = t[desc["weight"]["tensor"]][None, :]
    else:
        wall = weight
    for ins in desc["instructions"]:
        P = t[ins["cg"]["tensor"]]
        m1, l1, _ = items1[ins["i_in1"]]
        m2, l2, _ = items2[ins["i_in2"]]
        m3, l3, _ = items3[ins["i_out"]]
        a = x1[:, off1[ins["i_in1"]] : off1[ins["i_in1"] + 1]].reshape(n, m1, 2 * l1 + 1)
        b = x2[:, off2[ins["i_in2"]] : off2[ins["i_in2"] + 1]].reshape(n, m2, 2 * l2 + 1)
        shape = ins["path_shape"]
        numel = int(np.prod(shape))
        w = wall[:, ins["weight_offset"] : ins["weight_offset"] + numel].reshape(-1, *shape)
        if w.shape[0] == 1 and n != 1:
            w = np.broadcast_to(w, (n, *shape))
        mode = ins["mode"]
        if mode == "uvw":
            r = np.einsum("nuvw,ijk,nui,nvj->nwk", w, P, a, b, optimize=True)
        elif mode == "uvu":
            r = np.einsum("nuv,ijk,nui,nvj->nuk", w, P, a, b, optimize=True)
        elif mode == "uuu":
            r = np.einsum("nu,ijk,nui,nuj->nuk", w, P, a, b, optimize=True)
        else:
            raise ValueError(f"unknown tensor-product mode {mode!r}")
        out[:, off3[ins["i_out"]] : off3[ins["i_out"] + 1]] += r.reshape(n, -1)
    return out


def mlp(desc: Mapping[str, Any], x: np.ndarray, t: Tensors) -> np.ndarray:
    """``mlp`` op: per layer ``z = (x @ W) * weight_scale (+ b)``, ``z = out_scale * act(z)``."""
    for layer in desc["layers"]:
        W = t[layer["weight"]["tensor"]]
        x = (x @ W) * layer["weight_scale"]
        if layer.get("bias") is not None:
            x = x + t[layer["bias"]["tensor"]]
        ln = layer.get("layer_norm")
        if ln is not None:
            mu = x.mean(axis=1, keepdims=True)
            var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
            x = (x - mu) / np.sqrt(var + ln["eps"]) * t[ln["weight"]["tensor"]]
            x = x + t[ln["bias"]["tensor"]]
        if layer["activation"] is not None:
            x = _act(layer["activation"], x) * layer["out_scale"]
    return x


def activation(desc: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
    """``activation`` op: blockwise; a null entry passes the block through."""
    items, off = _blocks(desc["irreps_in"])
    y = x.copy()
    for b, act in enumerate(desc["acts"]):
        if act is not None:
            y[:, off[b] : off[b + 1]] = _act(act, x[:, off[b] : off[b + 1]])
    return y


def gate(desc: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
    """``gate`` op: gather scalars/gates/gated, activate, multiply gated copy k by gate k."""
    s = x[:, desc["index_scalars"]]
    g = x[:, desc["index_gates"]]
    v = x[:, desc["index_gated"]]
    s = activation({"irreps_in": desc["irreps_scalars"], "acts": desc["act_scalars"]}, s)
    g = activation({"irreps_in": desc["irreps_gates"], "acts": desc["act_gates"]}, g)
    parts = [s]
    k = 0
    pos = 0
    for mul, l, _ in parse_irreps(desc["irreps_gated"]):
        d = 2 * l + 1
        blk = v[:, pos : pos + mul * d].reshape(-1, mul, d)
        parts.append((blk * g[:, k : k + mul, None]).reshape(len(x), -1))
        k += mul
        pos += mul * d
    return np.concatenate(parts, axis=1)


def symmetric_contraction(
    desc: Mapping[str, Any], A: np.ndarray, species: np.ndarray, t: Tensors
) -> np.ndarray:
    """MACE product basis. ``A`` is ``[n, C, D]``; returns ``[n, dim(irreps_out)]``.

    ``B[n,c,M] = sum_nu sum_k W_nu[z_n,k,c] sum_{i_1..i_nu} U_nu[M,i_1..i_nu,k] prod_t A[n,c,i_t]``,
    laid out ``c*(2L+1)+M`` per output irrep, irreps concatenated in order.
    """
    n, C, D = A.shape
    outs = []
    for con in desc["contractions"]:
        L = con["L"]
        B = np.zeros((n, C, 2 * L + 1))
        for term in con["terms"]:
            U = t[term["U"]["tensor"]]  # [M, D^nu, K]
            W = t[term["W"]["tensor"]]  # [S, K, C]
            nu = term["nu"]
            for z in np.unique(species):
                idx = np.nonzero(species == z)[0]
                Y = np.tensordot(U, W[z], axes=([U.ndim - 1], [0]))  # [M, D^nu, C]
                Y = np.moveaxis(Y, -1, 0)  # [C, M, D^nu]
                Y = np.broadcast_to(Y, (len(idx),) + Y.shape)
                a = A[idx]  # [m, C, D]
                for _ in range(nu):
                    Y = np.einsum("ncm...i,nci->ncm...", Y, a)
                B[idx] += Y
        outs.append(B.reshape(n, -1))
    return np.concatenate(outs, axis=1)


# ---------------------------------------------------------------------------------------------
# MACE
# ---------------------------------------------------------------------------------------------


def _to_channel_major(x: np.ndarray, irreps: str) -> np.ndarray:
    """Flat ``mul_ir`` features (all muls equal C) -> ``[n, C, sum(2l+1)]``."""
    items, off = _blocks(irreps)
    n = x.shape[0]
    parts = []
    for b, (mul, l, _) in enumerate(items):
        parts.append(x[:, off[b] : off[b + 1]].reshape(n, mul, 2 * l + 1))
    return np.concatenate(parts, axis=2)


def _mace_edges(model: Mapping[str, Any], t: Tensors, species, vec, recv, send):
    mace = model["mace"]
    rad = mace["radial"]
    r = np.linalg.norm(vec, axis=1)
    Y = spherical_harmonics(model["spherical_harmonics"]["lmax"], vec)
    x = r.copy()
    dt = rad["distance_transform"]
    if dt is not None:
        cov = np.asarray(dt["covalent_radii"])
        if dt["type"] == "agnesi":
            r0 = 0.5 * (cov[species[send]] + cov[species[recv]])
            s = r / r0
            x = 1.0 / (1.0 + dt["a"] * s ** dt["q"] / (1.0 + s ** (dt["q"] - dt["p"])))
        elif dt["type"] == "soft":
            r0 = cov[species[send]] + cov[species[recv]]
            p0, p1 = 0.75 * r0, (4.0 / 3.0) * r0
            m = 0.5 * (p0 + p1)
            alpha = dt["alpha"] / (p1 - p0)
            x = p0 + (r - p0) * 0.5 * (1.0 + np.tanh(alpha * (r - m)))
        else:
            raise ValueError(f"unknown distance transform {dt['type']!r}")
    kind = rad.get("basis", "bessel")
    if kind == "bessel":
        w = t[rad["bessel_weights"]["tensor"]]
        basis = rad["prefactor"] * np.sin(w[None, :] * x[:, None]) / x[:, None]
    elif kind == "gaussian":
        c = t[rad["gaussian_centres"]["tensor"]]
        basis = np.exp(rad["gaussian_coeff"] * (x[:, None] - c[None, :]) ** 2)
    else:  # chebyshev T_n(x), n = 1..N, of the raw distance (as mace-torch)
        basis = np.polynomial.chebyshev.chebvander(x, rad["num_basis"])[:, 1:]
    fc = polynomial_cutoff(r, rad["cutoff"]["r_max"], rad["cutoff"]["p"])
    if rad["apply_cutoff"]:
        return r, Y, basis * fc[:, None], None
    return r, Y, basis, fc


def _zbl_mace(desc: Mapping[str, Any], species, r, recv, send, n: int) -> np.ndarray:
    Z = np.asarray(desc["atomic_numbers"], dtype=float)
    cov = np.asarray(desc["covalent_radii"])
    zu, zv = Z[species[send]], Z[species[recv]]
    a = desc["a_prefactor"] * desc["bohr"] / (zu ** desc["a_exp"] + zv ** desc["a_exp"])
    x = r / a
    c, e = desc["c"], desc["exponents"]
    phi = sum(c[k] * np.exp(-e[k] * x) for k in range(4))
    v = desc["coulomb"] * zu * zv / r * phi
    rc = cov[species[send]] + cov[species[recv]]
    v = 0.5 * v * polynomial_cutoff(r, rc, desc["p"])
    return np.bincount(recv, weights=v, minlength=n)


def mace_head(model: Mapping[str, Any], head: Optional[str]) -> Dict[str, Any]:
    """The ``mace`` section with head ``head``'s readouts, E0, scale/shift and embedding readout
    in the top-level fields (FORMAT.md §5 ``heads``); None: as stored (the default head).

    Raises
    ------
    ValueError
        If the file has no head of that name.

    Examples
    --------
    >>> # mace_head(model_json, "pbe")["scale_shift"]
    """
    mace = dict(model["mace"])
    if head is None:
        return mace
    heads = mace.get("heads") or []
    names = [h["name"] for h in heads]
    if head not in names:
        raise ValueError(f"head {head!r} is not one of the file's heads {names}")
    chosen = heads[names.index(head)]
    for key in ("readouts", "atomic_energies", "scale_shift"):
        mace[key] = chosen[key]
    if mace.get("embedding") is not None:
        mace["embedding"] = dict(mace["embedding"], readout=chosen.get("embedding_readout"))
    return mace


def evaluate_mace(
    model: Mapping[str, Any],
    t: Tensors,
    positions,
    species,
    cell=None,
    pbc=(False, False, False),
    edges=None,
    intermediates: bool = False,
    structure_inputs: Optional[Mapping[str, float]] = None,
    head: Optional[str] = None,
) -> Dict[str, np.ndarray]:
    """Per-atom and total energy of a MACE file (see :func:`evaluate`)."""
    from . import numpy_reference_arch as arch

    mace = mace_head(model, head)
    positions = np.asarray(positions, dtype=float)
    species = np.asarray(species, dtype=np.int64)
    n = len(positions)
    S = len(model["species"])
    if edges is None:
        centre, neigh, shift = neighbour_list(positions, cell, pbc, model["r_max"])
    else:
        centre, neigh, shift = edges
    recv, send = centre, neigh
    cellm = np.zeros((3, 3)) if cell is None else np.asarray(cell, dtype=float)
    vec = positions[recv] - positions[send] - shift @ cellm  # centre - neighbour(image)
    r, Y, ef, fc = _mace_edges(model, t, species, vec, recv, send)
    onehot = np.eye(S)[species]
    h = linear(mace["node_embedding"], onehot, t)
    e_embedding = np.zeros(n)
    if mace.get("embedding") is not None:
        h, e_embedding = arch.embedding(mace["embedding"], h, structure_inputs, t)
    inter_out = {"edge_sh": Y, "edge_radial": ef, "h0": h}
    zbl = np.zeros(n)
    if mace["pair_repulsion"] is not None:
        zbl = _zbl_mace(mace["pair_repulsion"], species, r, recv, send, n)
        inter_out["pair_energy"] = zbl
    layers = []
    for k, (inter, prod) in enumerate(zip(mace["interactions"], mace["products"])):
        if inter.get("kind") == "residual_nonlinear":
            sc, M = arch.nonlinear_interaction(
                inter, h, onehot, Y, ef, fc, recv, send, t, inter_out, k
            )
            A = _to_channel_major(M, inter["irreps_target"])
            B = symmetric_contraction(prod, A, species, t)
            h = linear(prod["linear"], B, t) + sc
            inter_out.update({f"layer{k}.A": A, f"layer{k}.sc": sc, f"layer{k}.B": B})
            inter_out[f"layer{k}.h"] = h
            layers.append(h)
            continue
        sc = None
        if inter["residual"]:
            sc = tensor_product(inter["skip_tp"], h, onehot, t)
        hu = linear(inter["linear_up"], h, t)
        tpw = mlp(inter["radial_mlp"], ef, t)
        inter_out[f"layer{k}.tp_weights"] = tpw
        if fc is not None:
            tpw = tpw * fc[:, None]
        msg = tensor_product(inter["conv_tp"], hu[send], Y, t, weight=tpw)
        M = np.zeros((n, msg.shape[1]))
        np.add.at(M, recv, msg)
        M = linear(inter["linear"], M, t)
        norm = inter["message_normalization"]
        if norm["type"] == "avg_num_neighbors":
            M = M / norm["avg_num_neighbors"]
        else:
            rho = mlp(norm["density_mlp"], ef, t)
            dens = np.tanh(rho**2)
            if fc is not None:
                dens = dens * fc[:, None]
            Dn = np.zeros((n, 1))
            np.add.at(Dn, recv, dens)
            M = M / (Dn + 1.0)
        if not inter["residual"]:
            M = tensor_product(inter["skip_tp"], M, onehot, t)
        A = _to_channel_major(M, inter["irreps_target"])
        B = symmetric_contraction(prod, A, species, t)
        h = linear(prod["linear"], B, t)
        if prod["add_skip"]:
            h = h + sc
        inter_out[f"layer{k}.A"] = A
        if sc is not None:
            inter_out[f"layer{k}.sc"] = sc
        inter_out[f"layer{k}.B"] = B
        inter_out[f"layer{k}.h"] = h
        layers.append(h)
    e_inter = zbl.copy()
    for ri, ro in enumerate(mace["readouts"]):
        x = layers[ro["layer"]]
        if ro["type"] == "linear":
            e = linear(ro["linear"], x, t)[:, 0]
        elif ro["type"] == "nonlinear_bias":
            e = arch.bias_readout(ro, x, t)
        else:
            z = linear(ro["linear_1"], x, t)
            z = activation(ro["activation"], z)
            e = linear(ro["linear_2"], z, t)[:, 0]
        inter_out[f"readout{ri}"] = e
        e_inter = e_inter + e
    ss = mace["scale_shift"]
    e0 = t[mace["atomic_energies"]["tensor"]][species]
    node_energy = e0 + ss["scale"] * e_inter + ss["shift"] + e_embedding
    if mace.get("embedding") is not None:
        inter_out["embedding_energy"] = e_embedding
    out = {
        "energy": np.array([node_energy.sum()]),
        "node_energy": node_energy,
        "num_edges": np.array([len(recv)]),
    }
    if intermediates:
        out.update(inter_out)
    return out


# ---------------------------------------------------------------------------------------------
# NequIP
# ---------------------------------------------------------------------------------------------


def _zbl_nequip(desc: Mapping[str, Any], species, r, x, centre, neigh, n: int) -> np.ndarray:
    Z = np.asarray(desc["atomic_numbers"], dtype=float)
    zi, zj = Z[species[centre]], Z[species[neigh]]
    xx = ((zi ** desc["pzbl"] + zj ** desc["pzbl"]) * r) / desc["a0"]
    psi = sum(c * np.exp(d * xx) for c, d in zip(desc["c"], desc["d"]))
    eng = desc["qqr2exesquare"] * ((zi * zj) / r) * psi
    eng = eng * polynomial_cutoff(x, 1.0, desc["cutoff_p"])
    return np.bincount(centre, weights=eng, minlength=n)


def evaluate_nequip(
    model: Mapping[str, Any],
    t: Tensors,
    positions,
    species,
    cell=None,
    pbc=(False, False, False),
    edges=None,
    intermediates: bool = False,
) -> Dict[str, np.ndarray]:
    """Per-atom and total energy of a NequIP file (see :func:`evaluate`)."""
    nq = model["nequip"]
    positions = np.asarray(positions, dtype=float)
    species = np.asarray(species, dtype=np.int64)
    n = len(positions)
    recip = t[nq["radial"]["rmax_recip"]["tensor"]]
    if edges is None:
        centre, neigh, shift = neighbour_list(positions, cell, pbc, model["r_max"])
    else:
        centre, neigh, shift = edges
    cellm = np.zeros((3, 3)) if cell is None else np.asarray(cell, dtype=float)
    vec = positions[neigh] + shift @ cellm - positions[centre]  # neighbour(image) - centre
    r = np.linalg.norm(vec, axis=1)
    x = r * recip[species[centre], species[neigh]]
    keep = x <= 1.0  # per-edge-type cutoff: edges beyond contribute exactly zero
    centre, neigh, vec, r, x = centre[keep], neigh[keep], vec[keep], r[keep], x[keep]
    Y = spherical_harmonics(model["spherical_harmonics"]["lmax"], vec)
    rad = nq["radial"]
    w = t[rad["bessel_weights"]["tensor"]]
    bessel = np.sin(np.pi * w[None, :] * x[:, None]) / (np.pi * x[:, None])
    emb = bessel * polynomial_cutoff(x, 1.0, rad["cutoff"]["p"])[:, None] * rad["factor"]
    attrs = t[nq["type_embedding"]["tensor"]][species]
    h = attrs
    inter = {"edge_sh": Y, "edge_embedding": emb, "h0": h}
    for k, layer in enumerate(nq["layers"]):
        old = h
        sc = tensor_product(layer["sc"], h, attrs, t) if layer["sc"] is not None else None
        xk = linear(layer["linear_1"], h, t)
        xk = (
            xk
            * t[layer["norm_const"]["tensor"]][
                species if t[layer["norm_const"]["tensor"]].size > 1 else np.zeros(n, dtype=int)
            ][:, None]
        )
        wts = mlp(layer["edge_mlp"], emb, t)
        msg = tensor_product(layer["tp"], xk[neigh], Y, t, weight=wts)
        agg = np.zeros((n, msg.shape[1]))
        np.add.at(agg, centre, msg)
        hk = linear(layer["linear_2"], agg, t)
        if sc is not None:
            hk = hk + sc
        inter[f"layer{k}.conv"] = hk
        hk = gate(layer["gate"], hk)
        if layer["resnet"]:
            hk = old + hk
        inter[f"layer{k}.h"] = hk
        h = hk
    e = mlp(nq["readout"], h, t)[:, 0]
    ss = nq["scale_shift"]
    e = t[ss["shifts"]["tensor"]][species] + t[ss["scales"]["tensor"]][species] * e
    if nq["pair_potential"] is not None:
        pair = _zbl_nequip(nq["pair_potential"], species, r, x, centre, neigh, n)
        inter["pair_energy"] = pair
        e = e + pair
    out = {"energy": np.array([e.sum()]), "node_energy": e, "num_edges": np.array([len(r)])}
    if intermediates:
        out.update(inter)
    return out


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def evaluate(
    model: Mapping[str, Any],
    tensors: Tensors,
    positions,
    species,
    cell=None,
    pbc=(False, False, False),
    edges=None,
    intermediates: bool = False,
    structure_inputs: Optional[Mapping[str, float]] = None,
    head: Optional[str] = None,
) -> Dict[str, np.ndarray]:
    """Evaluate a model file on one structure.

    Parameters
    ----------
    model, tensors : the decoded file (:func:`potentials.write.read_model`).
    positions : (N, 3) array, Angstrom.
    species : (N,) int, indices into ``model["species"]`` (not atomic numbers).
    cell : (3, 3) array, rows are lattice vectors; ignored along non-periodic directions.
    pbc : three bools.
    edges : optional ``(centre, neighbour, shift)`` to use instead of building the list.
    intermediates : also return per-layer intermediates (same keys as the golden file).
    structure_inputs : per-structure inputs of MACE embeddings, e.g. ``{"total_charge": 0}``.
    head : a head of a multi-head MACE file (None: the default head).

    Returns
    -------
    dict with ``energy`` (1,), ``node_energy`` (N,), ``num_edges`` (1,) and intermediates.

    Examples
    --------
    >>> # evaluate(model_json, tensors, atoms.positions, species, atoms.cell[:], atoms.pbc)
    """
    check_version(model)
    if model["arch"] == "mace":
        return evaluate_mace(
            model,
            tensors,
            positions,
            species,
            cell,
            pbc,
            edges,
            intermediates,
            structure_inputs,
            head,
        )
    if model["arch"] == "nequip":
        return evaluate_nequip(model, tensors, positions, species, cell, pbc, edges, intermediates)
    raise ValueError(f"unknown arch {model['arch']!r}")


def finite_difference_forces(
    model,
    tensors,
    positions,
    species,
    cell=None,
    pbc=(False, False, False),
    h: float = 1e-5,
    structure_inputs=None,
) -> np.ndarray:
    """Central-difference forces ``-dE/dr`` (slow: 6N energy evaluations; for tests)."""
    positions = np.asarray(positions, dtype=float)
    forces = np.zeros_like(positions)
    for a in range(len(positions)):
        for d in range(3):
            p = positions.copy()
            p[a, d] += h
            ep = evaluate(model, tensors, p, species, cell, pbc, structure_inputs=structure_inputs)[
                "energy"
            ][0]
            p[a, d] -= 2 * h
            em = evaluate(model, tensors, p, species, cell, pbc, structure_inputs=structure_inputs)[
                "energy"
            ][0]
            forces[a, d] = -(ep - em) / (2 * h)
    return forces
