"""Give the heap's freed pages back to the system once a conversation ends.

glibc keeps memory that Python and the native libraries (onnxruntime, CTranslate2, piper) free inside its arenas for
reuse, and a server with many threads has many arenas: after 100 conversation turns moss_sts held ~300 MB more
resident memory than fresh though no session was open (bench/results/latest/memory.json, 2026-11-30 01:13 UTC).
``malloc_trim(0)`` returns every whole free page of every arena to the system (madvise), so what a finished session
freed stops counting against the fleet's memory. Elsewhere (musl, macOS) there is nothing to call and nothing is
done.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def release_freed_memory() -> bool:
    """Return the heap's free pages to the system; True when some were (glibc's malloc_trim), False otherwise."""
    return bool(_TRIM(0)) if _TRIM is not None else False
