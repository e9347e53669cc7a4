"""Builds and loads the CPU kernels of ``cpu_kernels.c`` (through ctypes), or says they are unavailable.

On first use the source is compiled with the system C compiler (``$CC``, else ``cc``, else ``gcc``) into
infercore's cache folder, under a name made of the source's, the compiler's, the flags' and the CPU's
hash, so a build is reused only where it fits. The first flags that work win: ``-O3 -march=native
-fopenmp`` (the OpenMP runtime is the libgomp torch already loaded, so torch's thread count applies),
then without OpenMP, then without ``-march=native``. Concurrent builds are safe: each compiles to a
temporary name and renames it into place. Calls through ctypes release the GIL.

When no compiler is found, the build fails, or ``INFERCORE_CPU_KERNELS=0`` is set, :func:`library`
returns None (logged once at INFO) and the callers keep their torch code.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_kernels.c")
#: Flag sets tried in order; the first that compiles is used.
FLAG_SETS = (
    ("-O3", "-march=native", "-fopenmp"),
    ("-O3", "-march=native", "-fopenmp-simd"),
    ("-O3", "-fopenmp-simd"),
)
_COMMON_FLAGS = ("-shared", "-fPIC", "-std=gnu11")
_BUILD_TIMEOUT_S = 120

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_I32 = ctypes.c_int
_F = ctypes.c_float
#: (name, result type, argument types) of every exported kernel.
_SIGNATURES = (
    ("infercore_paged_decode", _I32,
     [_P, _I32, _I64, _I64, _P, _I64, _I64, _P, _P, _I32, _P, _I64, _P, _P, _P, _I64, _I32, _I32, _I32, _I32, _F,
      _I64, _F]),
    ("infercore_rms_norm_f32", None, [_P, _I64, _P, _I64, _P, _P, _P, _I64, _I64, _F]),
    ("infercore_silu_and_mul_f32", None, [_P, _I64, _P, _I64, _I64]),
    ("infercore_qk_norm_rotary_f32", None, [_P, _I64, _I32, _P, _I64, _I32, _P, _I64, _P, _P, _F, _P, _I32, _I32]),
    ("infercore_write_kv", _I32, [_P, _I64, _P, _I64, _I32, _P, _P, _I32, _P, _I64, _I32]),
)

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}  # by the value of $CC


def enabled() -> bool:
    """Whether the C kernels may be used at all (``INFERCORE_CPU_KERNELS=0`` turns them off)."""
    return os.environ.get("INFERCORE_CPU_KERNELS", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """Where builds are kept: ``$INFERCORE_CACHE_DIR``, else ``$XDG_CACHE_HOME/infercore``, else
    ``~/.cache/infercore`` (as the rest of infercore), under ``cpu_kernels``."""
    explicit = os.environ.get("INFERCORE_CACHE_DIR")
    base = Path(explicit) if explicit else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "infercore"
    return base / "cpu_kernels"


def find_compiler() -> str | None:
    """``$CC`` when set (whether or not it exists), else ``cc`` or ``gcc`` on the PATH."""
    explicit = os.environ.get("CC")
    if explicit:
        return explicit
    return shutil.which("cc") or shutil.which("gcc")


def _cpu_fingerprint() -> str:
    """The CPU's model and feature flags (a -march=native build runs only where these match)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine() + platform.processor()
    keep = [line for line in lines if line.startswith(("model name", "flags", "Features"))]
    return platform.machine() + "\n".join(sorted(set(keep)))


def _compile(compiler: str, flags: tuple[str, ...], target: Path) -> str | None:
    """Compile the source to ``target`` (through a temporary name); the error text, or None on success."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp.so", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run([compiler, *flags, *_COMMON_FLAGS, "-o", tmp, str(SOURCE), "-lm"],
                              capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
        if done.returncode != 0:
            return (done.stderr or done.stdout).strip()[-500:] or f"exit status {done.returncode}"
        os.replace(tmp, target)
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    for name, restype, argtypes in _SIGNATURES:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def build(compiler: str | None = None) -> ctypes.CDLL | None:
    """Compile (or reuse a cached build) and load the kernels; None, with the reason logged, if that fails."""
    compiler = compiler or find_compiler()
    if compiler is None:
        logger.info("no C compiler found (set CC): the CPU platform uses its torch kernels")
        return None
    source = SOURCE.read_bytes()
    errors = []
    for flags in FLAG_SETS:
        key = hashlib.sha256(b"\0".join([source, compiler.encode(), " ".join(flags).encode(),
                                         _cpu_fingerprint().encode()])).hexdigest()[:20]
        target = cache_dir() / f"cpu_kernels-{key}.so"
        if not target.exists():
            error = _compile(compiler, flags, target)
            if error is not None:
                errors.append(f"{' '.join(flags)}: {error}")
                continue
        try:
            return _declare(ctypes.CDLL(str(target)))
        except (OSError, AttributeError) as exc:
            errors.append(f"{' '.join(flags)}: loading {target}: {exc}")
    logger.info("building the CPU kernels with %s failed, the CPU platform uses its torch kernels: %s",
                compiler, " | ".join(errors))
    return None


def library() -> ctypes.CDLL | None:
    """The loaded kernels, built on first call; None when unavailable or turned off (the reason logged once
    per ``$CC`` value)."""
    if not enabled():
        return None
    key = os.environ.get("CC", "")
    try:
        return _loaded[key]
    except KeyError:
        pass
    with _lock:
        if key not in _loaded:
            _loaded[key] = build()
        return _loaded[key]


def reset() -> None:
    """Forget loaded builds (tests that change ``CC`` or ``INFERCORE_CPU_KERNELS``)."""
    with _lock:
        _loaded.clear()
