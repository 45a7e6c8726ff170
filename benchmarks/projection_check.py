"""Projection errors from measured peaks at 2, 4 and 8 concurrent sequences (issue 11).

    python benchmarks/projection_check.py --slot-bytes S N2.json N4.json N8.json [--record R.json]

Each ``Nk.json`` is a ``kvgate measure`` document (``domains[*].peak_used_bytes``; the
largest domain counts) of the same workload at k sequences; ``k`` is read from the file
name (``-n2``, ``_n8``, ``n4``...) or given in order by ``--levels 2,4,8``. ``S`` is the
KV-only bytes per sequence (the contiguous slot: layers × 2 × kv_heads × head_dim ×
bytes × max_cache_len), e.g. from ``kvgate geometry`` or the workload's own
``cache_bytes_formula / streams``.

Printed (all bytes are ints; percentages against the measured peak at the largest level):

- fit from the two smallest levels: marginal m = (P4 − P2) / 2, P8 ≈ P4 + 4m;
- KV-only from the middle level: P8 ≈ P4 + 4S;
- least squares over all levels (P ≈ a + b·n): a, b, the residual at each level and
  the largest; and the fit of the two smallest levels' residual at 8 (its error);
- ``--record``: a ``kvgate run`` record's own ``projection.fit_bytes`` and
  ``kv_only_bytes``, compared the same way.

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from fractions import Fraction


def peak(path: str) -> int:
    doc = json.load(open(path))
    if doc.get("status") not in (None, "ok"):
        raise SystemExit(f"{path}: status {doc.get('status')}")
    return max(int(d["peak_used_bytes"]) for d in doc["domains"])


def level_of(path: str) -> int | None:
    m = re.search(r"n(\d+)(?:\D*)\.json$", path)
    return int(m.group(1)) if m else None


def lstsq(ns: list[int], ps: list[int]) -> tuple[Fraction, Fraction]:
    """Exact least squares ``P = a + b n`` (Fractions)."""
    k = len(ns)
    sx, sy = sum(ns), sum(ps)
    sxx, sxy = sum(n * n for n in ns), sum(n * p for n, p in zip(ns, ps))
    b = Fraction(k * sxy - sx * sy, k * sxx - sx * sx)
    a = Fraction(sy - b * sx, k)
    return a, b


def pct(err: Fraction | int, ref: int) -> float:
    return float(Fraction(err) * 100 / ref)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="projection errors from measured peaks")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--slot-bytes", type=int, required=True)
    ap.add_argument("--levels", default=None)
    ap.add_argument("--record", default=None)
    ap.add_argument("--name", default="")
    a = ap.parse_args(argv)
    levels = [int(x) for x in a.levels.split(",")] if a.levels else [level_of(f) for f in a.files]
    if None in levels or len(levels) != len(a.files):
        ap.error("cannot read the levels from the file names: give --levels")
    pts = sorted(zip(levels, (peak(f) for f in a.files)))
    ns, ps = [n for n, _ in pts], [p for _, p in pts]
    (n1, p1), (n2, p2), (nt, pt) = pts[0], pts[1], pts[-1]
    S = a.slot_bytes
    m = Fraction(p2 - p1, n2 - n1)
    fit = p2 + m * (nt - n2)
    kv = p2 + S * (nt - n2)
    A, B = lstsq(ns, ps)
    resid = [int(round(p - (A + B * n))) for n, p in pts]
    out = {"name": a.name, "levels": ns, "peaks_bytes": ps, "slot_bytes": S,
           "marginal_small_bytes": int(round(m)), "marginal_per_step_bytes":
           [int(round(Fraction(ps[i + 1] - ps[i], ns[i + 1] - ns[i]))) for i in range(len(ns) - 1)],
           "fit2_projected_bytes": int(round(fit)), "fit2_error_bytes": int(round(fit - pt)),
           "fit2_error_pct": pct(fit - pt, pt),
           "kv_only_projected_bytes": kv, "kv_only_error_bytes": kv - pt, "kv_only_error_pct": pct(kv - pt, pt),
           "lsq_intercept_bytes": int(round(A)), "lsq_slope_bytes": int(round(B)), "lsq_residuals_bytes": resid,
           "lsq_max_abs_residual_pct_of_target": pct(max(abs(r) for r in resid), pt)}
    print(f"{a.name}: peaks " + ", ".join(f"n={n}: {p:,} B" for n, p in pts) + f"; S = {S:,} B")
    print(f"  marginal per sequence {n1}->{n2}: {int(round(m)):,} B; per step: "
          + ", ".join(f"{x:,}" for x in out["marginal_per_step_bytes"]))
    print(f"  fit from {n1},{n2} -> {nt}: {out['fit2_projected_bytes']:,} B, error {out['fit2_error_bytes']:+,} B "
          f"({out['fit2_error_pct']:+.2f}%)")
    print(f"  KV-only from {n2} -> {nt}: {kv:,} B, error {kv - pt:+,} B ({out['kv_only_error_pct']:+.2f}%)")
    print(f"  least squares over {ns}: {int(round(A)):,} + {int(round(B)):,}·n; residuals "
          + ", ".join(f"{r:+,}" for r in resid) + f" B (max {out['lsq_max_abs_residual_pct_of_target']:.2f}% of P{nt})")
    if a.record:
        rec = json.load(open(a.record))
        proj = rec.get("projection") or {}
        for key in ("fit_bytes", "kv_only_bytes"):
            if proj.get(key) is not None:
                p = int(Fraction(proj[key]))
                out[f"record_{key}"] = p
                out[f"record_{key}_error_pct"] = pct(p - pt, pt)
                print(f"  record {key}: {p:,} B, error {p - pt:+,} B ({pct(p - pt, pt):+.2f}%)")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
