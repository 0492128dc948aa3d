"""Probe: asr+brain+moss_sts on free ports; N conversations of 10 turns straight to moss_sts; moss_sts memory per session."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path[:0] = [".", "gen/python"]
from bench.memory import QUESTIONS, SENTENCE  # noqa: E402 - after the sys.path line
from services.cli.fleet import LocalFleet, write_ephemeral_config  # noqa: E402 - after the sys.path line
from services.cli.memory import children_by_parent, process_tree, pss_bytes  # noqa
from services.common.config import load_config  # noqa: E402 - after the sys.path line

MB = 1 << 20
sessions = int(sys.argv[1])
tag = sys.argv[2]
extra_env = dict(kv.split("=", 1) for kv in sys.argv[3:])
out = Path(f"/tmp/memprobe/{tag}")
out.mkdir(parents=True, exist_ok=True)


def breakdown(pid):
    cats = {}
    cur = None
    for line in open(f"/proc/{pid}/smaps"):
        parts = line.split()
        if not parts[0].endswith(":") or len(parts[0]) > 30 and "-" in parts[0]:
            pass
        if "-" in parts[0] and not parts[0].endswith(":"):
            rng = parts[0].split("-")
            size = int(rng[1], 16) - int(rng[0], 16)
            name = parts[5] if len(parts) > 5 else ""
            if name == "[heap]":
                cur = "heap"
            elif name.startswith("["):
                cur = name
            elif name:
                cur = "file:" + (
                    "python"
                    if "python" in name
                    else os.path.basename(name)
                    if name.endswith(".so") or ".so." in name
                    else "other"
                )
            else:
                cur = "anon64M" if size >= 60 * MB else ("anon>=1M" if size >= MB else "anon<1M")
        elif parts[0] == "Pss:":
            cats[cur] = cats.get(cur, 0) + int(parts[1]) * 1024
    # fold small file categories
    res = {}
    for k, v in cats.items():
        if k.startswith("file:") and v < 5 * MB:
            k = "file:small"
        res[k] = res.get(k, 0) + v
    return {k: round(v / MB, 1) for k, v in sorted(res.items(), key=lambda kv: -kv[1])}


def sample(pid):
    pss = pss_bytes(pid) / MB
    threads = len(os.listdir(f"/proc/{pid}/task"))
    kids = process_tree(pid, children_by_parent())[1:]
    return {
        "pss_mb": round(pss, 1),
        "threads": threads,
        "children": {k: round(pss_bytes(k) / MB, 1) for k in kids},
        "by_mapping": breakdown(pid),
    }


d = out
path = write_ephemeral_config(d, ("asr", "brain", "moss_sts"))
cfg = load_config(path)
fleet = LocalFleet(cfg, str(path), log_dir=d / "logs")
moss = cfg.moss_sts.address
records = []
try:
    fleet.spawn("asr")
    fleet.spawn("brain")
    fleet.env.update(extra_env)
    fleet.spawn("moss_sts")
    fleet.wait_serving(["asr", "brain", "moss_sts"], 600)
    pid = fleet.members["moss_sts"].process.pid

    def cli(*args):
        cmd = [
            sys.executable,
            "-m",
            "services.cli.main",
            "--config",
            str(path),
            "--router",
            moss,
            "--wait",
            "60",
            *args,
        ]
        r = subprocess.run(
            cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": ".:gen/python"}
        )
        if r.returncode:
            raise RuntimeError(r.stdout + r.stderr)
        return r.stdout

    wav, reply = d / "said.wav", d / "reply.wav"
    cli("speak", SENTENCE, "-o", str(wav))
    cli("converse", str(wav), "-o", str(reply), "--fast")
    qs = []
    for i, q in enumerate(QUESTIONS):
        qs.append(str(d / f"q{i}.wav"))
        cli("speak", q, "-o", qs[-1])
    rec = {"turns": 1, "t": time.time(), **sample(pid)}
    records.append(rec)
    print(json.dumps(rec), flush=True)
    for s in range(sessions):
        t0 = time.time()
        o = cli("converse", "--turns", *qs, "-o", str(reply), "--fast")
        if os.environ.get("PROBE_SIGNAL"):
            os.kill(pid, signal.SIGUSR1)
            time.sleep(3)
        rec = {"turns": 1 + 10 * (s + 1), "session_s": round(time.time() - t0, 1), **sample(pid)}
        records.append(rec)
        print(json.dumps(rec), flush=True)
        (d / f"converse-{s}.txt").write_text(o)
finally:
    fleet.stop()
    (d / "records.json").write_text(json.dumps(records, indent=1))
