"""PSS of the asr's pass-1 process with 1, 2 and 8 pocketsphinx decoders warmed (each loads its own models)."""

from services.engines.asr.cpu_engine import PocketsphinxPool


def status_mb(pid: int, path: str, key: str) -> float:
    with open(f"/proc/{pid}/{path}") as f:
        return int(next(line.split()[1] for line in f if line.startswith(key))) / 1024


pool = PocketsphinxPool()
for count, more in ((1, 1), (2, 1), (8, 6)):
    pool.warm(more)
    pid = pool.process._process.pid
    rss, pss = status_mb(pid, "status", "VmRSS"), status_mb(pid, "smaps_rollup", "Pss:")
    print(f"{count} decoders: rss {rss:.0f} pss {pss:.0f} MB")
pool.close()
