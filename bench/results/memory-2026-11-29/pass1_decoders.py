from services.engines.asr.cpu_engine import PocketsphinxPool


def rss(pid):
    return int(next(l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS"))) / 1024


def pss(pid):
    return int(next(l.split()[1] for l in open(f"/proc/{pid}/smaps_rollup") if l.startswith("Pss:"))) / 1024


p = PocketsphinxPool()
p.warm(1)
pid = p.process._process.pid
print("1 decoder: rss %.0f pss %.0f MB" % (rss(pid), pss(pid)))
p.warm(1)
print("2 decoders: rss %.0f pss %.0f MB" % (rss(pid), pss(pid)))
p.warm(6)
print("8 decoders: rss %.0f pss %.0f MB" % (rss(pid), pss(pid)))
p.close()
