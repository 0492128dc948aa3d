import asyncio, os, sys, tempfile, time, resource
import grpc
sys.argv = [sys.argv[0], "1"]
exec(open("/tmp/rtp/rt_probe.py").read().split("with tempfile.TemporaryDirectory() as tmp:")[0])
TICK = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    with open(f"/proc/{pid}/stat") as f: s=f.read()
    r=s[s.rindex(")")+2:].split(); return (int(r[11])+int(r[12]))/TICK
def me():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
with tempfile.TemporaryDirectory() as tmp:
    fleet = LocalFleet.on_free_ports(tmp, services=("asr", "brain", "moss_sts", "router", "gateway"), moss_sts={"default_max_tokens": 32})
    try:
        url = f"http://{fleet.config.gateway.address}"
        ts = build(23); lines = [ts.line(i) for i in ts.complete[:3]]
        with grpc.insecure_channel(fleet.config.router.address) as ch:
            for n, line in enumerate(lines):
                for route in ("realtime", "converse"):
                    a = {k: cpu(m.process.pid) for k, m in fleet.members.items()}; s0 = me(); t0 = time.time()
                    if route == "realtime":
                        asyncio.run(rt_line(url, line))
                    else:
                        turn_taking.one_line(ch, line, f"c{n}")
                    b = {k: cpu(m.process.pid) for k, m in fleet.members.items()}
                    print(route, f"{time.time()-t0:.1f}s", {k: round(b[k]-a[k], 2) for k in a}, "client", round(me()-s0, 2))
    finally:
        fleet.stop()
