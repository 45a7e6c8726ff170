"""A native NVML sampling loop: our own ~80 lines of C, compiled on first use, no NVML header.

Why (issue 9, measured on an H200 VM, ``benchmarks/sampler_cost.py``): at the 1 ms default a
Python sampling thread costs ~47–58 µs of CPU per sample (5–6% of one core): ~14 µs is the
bare ``time.sleep`` wake-up, ~10 µs kvgate's bookkeeping and ~25–30 µs the NVML query
through pynvml when the thread wakes cold. A C thread that only wakes, queries and stores
the sample in a ring buffer, drained by the Python thread every :data:`DRAIN_S`, keeps the
wake-up + query; the C loop pushes only what the Python bookkeeping needs (every idle
sample, every change of value, every gap above the sampler's current gap floor; the
samples in between only add to a count), so the Python thread wakes every
:data:`DRAIN_S` and has almost nothing to do.

What the C loop does, nothing more: every ``interval_ns`` (deadline-based, absolute
``clock_nanosleep`` on ``CLOCK_MONOTONIC``, the clock of Python's ``time.monotonic``), call
``nvmlDeviceGetMemoryInfo_v2`` (or v1) for each handle through a function pointer that
Python takes from the already loaded ``libnvidia-ml.so.1`` (pynvml's ``nvmlLib``), so the C
needs neither NVML's header nor linking against it; store ``(t_ns, total − free per GPU)``
in a single-producer/single-consumer ring; keep each channel's exact peak even if the ring
overflows; stop at the first non-zero NVML return code and keep it.

Build: ``cc -O2 -shared -fPIC -pthread`` into ``$XDG_CACHE_HOME/kvgate`` (or
``~/.cache/kvgate``, else the temp directory), named by the source's hash, written
atomically. No compiler, a failed build, or ``KVGATE_NATIVE_SAMPLER=0`` → :func:`load`
returns ``None`` and the sampler runs its Python loop (with the ctypes reader of
:meth:`kvgate.measure.nvml.Nvml.used_reader`).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DRAIN_S = 0.1  # the Python thread drains the ring this often
RING = 1 << 16  # samples held between drains (65 s at 1 ms)
MAX_CHANNELS = 16
NATIVE_MAX_INTERVAL_S = 0.05  # above this the Python loop costs < 0.1% of a core anyway

C_SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>

typedef int (*memfn_t)(void *dev, void *mem);
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } mem2_t;
typedef struct { unsigned long long total, free, used; } mem1_t;
#define MAXCH 16

typedef struct {
  memfn_t fn; int v2; unsigned int version; int n; void *dev[MAXCH];
  int64_t interval_ns; uint64_t cap; int64_t *ts, *pts, *cnt, *vals;
  uint64_t head, tail, dropped; int stop, rc, running;
  int64_t start_ns, floor_ns;  /* written by Python: the workload start, the gap floor */
  int64_t peak[MAXCH], peak_t[MAXCH];
  pthread_t th;
} kv_loop;

/* one ring entry: sample time, the time of the sample before it, how many samples it
   stands for (itself and the unchanged ones not pushed before it), the values */
static void push(kv_loop *p, int64_t t, int64_t pt, int64_t cnt, const int64_t *v) {
  uint64_t h = p->head, tl = __atomic_load_n(&p->tail, __ATOMIC_ACQUIRE);
  if (h - tl >= p->cap) { __atomic_add_fetch(&p->dropped, 1, __ATOMIC_RELAXED); return; }
  uint64_t k = h & (p->cap - 1);
  p->ts[k] = t; p->pts[k] = pt; p->cnt[k] = cnt;
  memcpy(p->vals + k * p->n, v, sizeof(int64_t) * p->n);
  __atomic_store_n(&p->head, h + 1, __ATOMIC_RELEASE);
}

static int64_t now_ns(void) {
  struct timespec s; clock_gettime(CLOCK_MONOTONIC, &s);
  return (int64_t)s.tv_sec * 1000000000LL + s.tv_nsec;
}

static void *run(void *arg) {
  kv_loop *p = (kv_loop *)arg;
  int64_t next = now_ns(), v[MAXCH], last_v[MAXCH], last_t = 0, prev_last_t = 0, pending = 0;
  int have_last = 0, last_pushed = 0;
  mem2_t m2; mem1_t m1;
  while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
    for (int i = 0; i < p->n; i++) {
      int rc;
      if (p->v2) { m2.version = p->version; rc = p->fn(p->dev[i], &m2); v[i] = (int64_t)(m2.total - m2.free); }
      else { rc = p->fn(p->dev[i], &m1); v[i] = (int64_t)(m1.total - m1.free); }
      if (rc) { __atomic_store_n(&p->rc, rc, __ATOMIC_RELEASE); goto out; }
    }
    int64_t t = now_ns();
    for (int i = 0; i < p->n; i++)
      if (v[i] > p->peak[i] || p->peak_t[i] == 0) { p->peak[i] = v[i]; p->peak_t[i] = t; }
    /* Push what the Python side needs, skip the rest: every idle sample (the idle
       median), the first after the start, every change of value (with the unchanged
       sample before it, so steps stay steps), every gap above the floor; an unchanged
       sample only adds to the next entry's count. */
    pending++;
    int64_t st = __atomic_load_n(&p->start_ns, __ATOMIC_ACQUIRE), fl = __atomic_load_n(&p->floor_ns, __ATOMIC_ACQUIRE);
    int changed = !have_last || memcmp(v, last_v, sizeof(int64_t) * p->n) != 0;
    int must = !have_last || st == 0 || t < st || last_t < st || changed || t - last_t > fl;
    if (must) {
      if (changed && have_last && !last_pushed && pending > 1) {
        push(p, last_t, prev_last_t, pending - 1, last_v);
        pending = 1;
      }
      push(p, t, have_last ? last_t : 0, pending, v);
      pending = 0;
    }
    last_pushed = must; prev_last_t = last_t; last_t = t; have_last = 1;
    memcpy(last_v, v, sizeof(int64_t) * p->n);
    next += p->interval_ns;
    if (next <= t) { next = t; continue; }  /* fell behind: no burst to catch up */
    struct timespec d = { next / 1000000000LL, next % 1000000000LL };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) == EINTR) {}
  }
out:
  if (have_last && !last_pushed && pending > 0) push(p, last_t, prev_last_t, pending, last_v);
  return NULL;
}

kv_loop *kv_create(void *fn, int v2, unsigned int version, int n, void **dev, int64_t interval_ns, uint64_t cap) {
  if (n < 1 || n > MAXCH || cap == 0 || (cap & (cap - 1))) return NULL;
  kv_loop *p = calloc(1, sizeof(kv_loop));
  if (!p) return NULL;
  p->fn = (memfn_t)fn; p->v2 = v2; p->version = version; p->n = n; p->interval_ns = interval_ns; p->cap = cap;
  for (int i = 0; i < n; i++) p->dev[i] = dev[i];
  p->ts = malloc(sizeof(int64_t) * cap); p->pts = malloc(sizeof(int64_t) * cap);
  p->cnt = malloc(sizeof(int64_t) * cap); p->vals = malloc(sizeof(int64_t) * cap * n);
  if (!p->ts || !p->pts || !p->cnt || !p->vals) {
    free(p->ts); free(p->pts); free(p->cnt); free(p->vals); free(p); return NULL;
  }
  return p;
}
int kv_start(kv_loop *p) { int e = pthread_create(&p->th, NULL, run, p); if (!e) p->running = 1; return e; }
void kv_set_start(kv_loop *p, int64_t ns) { __atomic_store_n(&p->start_ns, ns, __ATOMIC_RELEASE); }
void kv_set_floor(kv_loop *p, int64_t ns) { __atomic_store_n(&p->floor_ns, ns, __ATOMIC_RELEASE); }
uint64_t kv_drain(kv_loop *p, int64_t *ts, int64_t *pts, int64_t *cnt, int64_t *vals, uint64_t max) {
  uint64_t tl = p->tail, h = __atomic_load_n(&p->head, __ATOMIC_ACQUIRE), k = 0;
  for (; tl + k < h && k < max; k++) {
    uint64_t j = (tl + k) & (p->cap - 1);
    ts[k] = p->ts[j]; pts[k] = p->pts[j]; cnt[k] = p->cnt[j];
    memcpy(vals + k * p->n, p->vals + j * p->n, sizeof(int64_t) * p->n);
  }
  __atomic_store_n(&p->tail, tl + k, __ATOMIC_RELEASE);
  return k;
}
void kv_stop(kv_loop *p) {
  __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
  if (p->running) { pthread_join(p->th, NULL); p->running = 0; }
}
int kv_rc(kv_loop *p) { return __atomic_load_n(&p->rc, __ATOMIC_ACQUIRE); }
uint64_t kv_dropped(kv_loop *p) { return __atomic_load_n(&p->dropped, __ATOMIC_RELAXED); }
int64_t kv_peak(kv_loop *p, int i, int64_t *t) { *t = p->peak_t[i]; return p->peak[i]; }
int64_t kv_cpu_ns(kv_loop *p) {
  clockid_t c; struct timespec s;
  if (!p->running || pthread_getcpuclockid(p->th, &c) || clock_gettime(c, &s)) return -1;
  return (int64_t)s.tv_sec * 1000000000LL + s.tv_nsec;
}
void kv_free(kv_loop *p) { if (p) { kv_stop(p); free(p->ts); free(p->pts); free(p->cnt); free(p->vals); free(p); } }

/* The wake-up alone, for the benchmark: CPU ns of a thread that only sleeps to deadlines. */
int64_t kv_sleep_loop_cpu_ns(int64_t interval_ns, int64_t count) {
  int64_t next = now_ns();
  for (int64_t i = 0; i < count; i++) {
    next += interval_ns;
    struct timespec d = { next / 1000000000LL, next % 1000000000LL };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) == EINTR) {}
  }
  struct timespec s; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &s);
  return (int64_t)s.tv_sec * 1000000000LL + s.tv_nsec;
}
"""

_LIB: Any = None
_LIB_TRIED = False
build_error: str | None = None  # why the last build failed (for the record), None if it did not


def _cache_dirs() -> list[Path]:
    out = []
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        out.append(Path(xdg) / "kvgate")
    out.append(Path.home() / ".cache" / "kvgate")
    out.append(Path(tempfile.gettempdir()) / f"kvgate-{os.getuid() if hasattr(os, 'getuid') else 'u'}")
    return out


def _build(target: Path) -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise OSError("no C compiler (cc, gcc or clang) on PATH")
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, src = tempfile.mkstemp(suffix=".c", dir=target.parent)
    tmp = src[:-2] + ".so"
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(C_SOURCE)
        r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", "-o", tmp, src],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise OSError(f"{cc} failed: {r.stderr.strip()[:300]}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)  # atomic: a concurrent kvgate sees the old file or the new one
    finally:
        for p in (src, tmp):
            try:
                os.unlink(p)
            except OSError:
                pass


def _check_owner(p: Path) -> None:
    """Refuse a cache directory or library that another user owns or everyone can write (the temp
    directory fallback is shared): loading it would run their code as us.

    Raises:
        OSError: another owner, or writable by everyone.
    """
    if not hasattr(os, "getuid"):
        return
    st = p.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o002:
        raise OSError(f"{p} is not ours alone (owner {st.st_uid}, mode {oct(st.st_mode & 0o777)})")


def load() -> Any:
    """The compiled helper as a ``ctypes.CDLL`` with its prototypes set, or ``None``.

    Built once per source version and machine (see the module docstring); every failure is
    kept in :data:`build_error` and gives ``None``, never an exception.
    """
    global _LIB, _LIB_TRIED, build_error
    if _LIB_TRIED:
        return _LIB
    _LIB_TRIED = True
    if os.environ.get("KVGATE_NATIVE_SAMPLER", "1") == "0":
        build_error = "disabled by KVGATE_NATIVE_SAMPLER=0"
        return None
    name = f"sampler-{hashlib.sha256(C_SOURCE.encode()).hexdigest()[:16]}.so"
    errors = []
    for d in _cache_dirs():
        path = d / name
        try:
            if not path.exists():
                _build(path)
            _check_owner(d)
            _check_owner(path)
            lib = ctypes.CDLL(str(path))
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{d}: {exc}")
            continue
        _prototypes(lib)
        _LIB = lib
        build_error = None
        return lib
    build_error = "; ".join(errors) or "no cache directory"
    return None


def _prototypes(lib: Any) -> None:
    c = ctypes
    lib.kv_create.restype = c.c_void_p
    lib.kv_create.argtypes = [c.c_void_p, c.c_int, c.c_uint, c.c_int, c.POINTER(c.c_void_p), c.c_int64, c.c_uint64]
    lib.kv_start.argtypes = [c.c_void_p]
    lib.kv_drain.restype = c.c_uint64
    lib.kv_drain.argtypes = [c.c_void_p, c.c_void_p, c.c_void_p, c.c_void_p, c.c_void_p, c.c_uint64]
    lib.kv_set_start.argtypes = [c.c_void_p, c.c_int64]
    lib.kv_set_floor.argtypes = [c.c_void_p, c.c_int64]
    lib.kv_stop.argtypes = [c.c_void_p]
    lib.kv_rc.argtypes = [c.c_void_p]
    lib.kv_dropped.restype = c.c_uint64
    lib.kv_dropped.argtypes = [c.c_void_p]
    lib.kv_peak.restype = c.c_int64
    lib.kv_peak.argtypes = [c.c_void_p, c.c_int, c.POINTER(c.c_int64)]
    lib.kv_cpu_ns.restype = c.c_int64
    lib.kv_cpu_ns.argtypes = [c.c_void_p]
    lib.kv_free.argtypes = [c.c_void_p]
    lib.kv_sleep_loop_cpu_ns.restype = c.c_int64
    lib.kv_sleep_loop_cpu_ns.argtypes = [c.c_int64, c.c_int64]


class NativeSpec:
    """What the C loop needs from NVML: the memory function's address, whether it is v2
    (with the struct version word), and the device handles' addresses."""

    def __init__(self, fn_addr: int, v2: bool, version: int, handle_addrs: Sequence[int]) -> None:
        self.fn_addr, self.v2, self.version, self.handle_addrs = fn_addr, v2, version, list(handle_addrs)


class NativeLoop:
    """One running C sampling loop (see the module docstring).

    ``drain()`` returns the samples taken since the last drain as ``(times_s, values)``:
    ``times_s[k]`` on the ``time.monotonic`` clock, ``values[k]`` a list of ``int`` bytes
    per channel.

    Raises:
        OSError: the loop could not be created or its thread not started.
    """

    def __init__(self, lib: Any, spec: NativeSpec, interval_s: float, ring: int = RING) -> None:
        n = len(spec.handle_addrs)
        if not 1 <= n <= MAX_CHANNELS:
            raise OSError(f"the native sampler takes 1 to {MAX_CHANNELS} GPUs, not {n}")
        self.lib, self.n = lib, n
        devs = (ctypes.c_void_p * n)(*spec.handle_addrs)
        self._p = lib.kv_create(spec.fn_addr, int(spec.v2), spec.version, n, devs,
                                max(1, int(round(interval_s * 1e9))), ring)
        if not self._p:
            raise OSError("kv_create failed")
        self._max = 4096
        self._ts = array("q", bytes(8 * self._max))
        self._pts = array("q", bytes(8 * self._max))
        self._cnt = array("q", bytes(8 * self._max))
        self._vals = array("q", bytes(8 * self._max * n))
        if lib.kv_start(self._p) != 0:
            lib.kv_free(self._p)
            self._p = None
            raise OSError("cannot start the native sampling thread")

    def drain(self) -> list[tuple[float, float | None, int, list[int]]]:
        """The entries pushed since the last drain, oldest first: ``(t_s, prev_t_s or None,
        count, values)``. ``count`` samples are represented (this one and the unchanged
        ones before it that the loop did not push); ``prev_t_s`` is the time of the sample
        taken right before this one."""
        out: list[tuple[float, float | None, int, list[int]]] = []
        n = self.n
        addr = [b.buffer_info()[0] for b in (self._ts, self._pts, self._cnt, self._vals)]
        while True:
            k = self.lib.kv_drain(self._p, *addr, self._max)
            ts, pts, cnt, vs = self._ts, self._pts, self._cnt, self._vals
            for i in range(k):
                out.append((ts[i] * 1e-9, pts[i] * 1e-9 if pts[i] else None, cnt[i], vs[i * n:(i + 1) * n].tolist()))
            if k < self._max:
                return out

    def set_start(self, t_s: float) -> None:
        """Tell the loop when the workload started (``time.monotonic`` seconds)."""
        self.lib.kv_set_start(self._p, int(t_s * 1e9))

    def set_floor(self, floor_s: float) -> None:
        """Gaps longer than this are always pushed (the sampler's current gap floor)."""
        self.lib.kv_set_floor(self._p, max(0, int(floor_s * 1e9)))

    def rc(self) -> int:
        """The NVML return code that stopped the loop, 0 while it runs."""
        return int(self.lib.kv_rc(self._p))

    def dropped(self) -> int:
        return int(self.lib.kv_dropped(self._p))

    def peak(self, i: int) -> tuple[float, int]:
        """Channel ``i``'s exact peak over every sample the loop took: ``(time_s, bytes)``."""
        t = ctypes.c_int64()
        v = self.lib.kv_peak(self._p, i, ctypes.byref(t))
        return t.value * 1e-9, int(v)

    def cpu_s(self) -> float | None:
        """CPU seconds used by the C thread so far (``None`` once stopped)."""
        ns = self.lib.kv_cpu_ns(self._p)
        return None if ns < 0 else ns * 1e-9

    def stop(self) -> None:
        if self._p:
            self.lib.kv_stop(self._p)

    def close(self) -> None:
        if self._p:
            self.lib.kv_free(self._p)
            self._p = None
