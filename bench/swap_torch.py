"""bench/swap.py's torch part, run in a GPU stack's venv (torch is not in the CPU fleet's): the shared helper's
offload / reload of 256 MiB of linear layers on CPU, N cycles; prints one JSON line."""

from __future__ import annotations

import json
import sys
import time


def main(cycles: int) -> None:
    import torch

    from services.residency.torch_offload import HostOffload

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048, bias=False) for _ in range(16)]).eval()
    x = torch.randn(4, 2048)
    with torch.no_grad():
        before = model(x)
    host = HostOffload([model])
    outs, ins = [], []
    nbytes = 0
    for _ in range(cycles):
        t0 = time.perf_counter()
        moved = host.offload()
        outs.append(time.perf_counter() - t0)
        nbytes = moved.bytes
        t0 = time.perf_counter()
        host.reload()
        ins.append(time.perf_counter() - t0)
    with torch.no_grad():
        assert torch.equal(before, model(x)), "the weights changed across offload/reload"
    print(json.dumps({"bytes": nbytes, "out": outs, "in": ins, "torch": torch.__version__}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
