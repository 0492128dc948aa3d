import os

from services.cli.memory import pss_bytes

MB = 1 << 20


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
    kids = []
    return {
        "pss_mb": round(pss, 1),
        "threads": threads,
        "children": {k: round(pss_bytes(k) / MB, 1) for k in kids},
        "by_mapping": breakdown(pid),
    }
