"""PSS of pass-1 pocketsphinx decoders made as the service makes them (each loads its own models), against decoders
that share the first one's language model (``Decoder.add_lm``).

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/latency-probes-2026-11-29/ps_share.py each|shared_lm N
"""

import sys
import time

from pocketsphinx import Decoder

from services.engines.asr.cpu_engine import INTERIM_SEARCH


def pss_mb() -> float:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no Pss in smaps_rollup")


mode, count = sys.argv[1], int(sys.argv[2])
base = pss_mb()
decoders = []
t0 = time.monotonic()
if mode == "each":
    decoders = [Decoder(samprate=16000, loglevel="FATAL", **INTERIM_SEARCH) for _ in range(count)]
else:
    first = Decoder(samprate=16000, loglevel="FATAL", **INTERIM_SEARCH)
    shared = first.get_lm()  # the default search's language model
    decoders.append(first)
    for _ in range(count - 1):
        decoder = Decoder(samprate=16000, loglevel="FATAL", lm=None, **INTERIM_SEARCH)
        decoder.add_lm("shared", shared)
        decoder.activate_search("shared")
        decoders.append(decoder)
grown = pss_mb() - base
print(f"{mode} {count}: PSS {grown:.0f} MB ({grown / count:.0f} each), {time.monotonic() - t0:.2f} s to make")
