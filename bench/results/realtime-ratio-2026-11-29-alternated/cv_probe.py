import sys
import tempfile

import grpc

from bench import turn_taking
from bench.turn_set import build
from bench.turn_taking import Caller, endpointing_line
from services.cli.fleet import LocalFleet
from voice.v1 import recognizer_pb2

VARIANTS = {
    "16k en-US": dict(rate=16000, language="en-US"),
    "24k en-US": dict(rate=24000, language="en-US"),
    "16k none": dict(rate=16000, language=""),
}


def cfg(rate, language):
    c = turn_taking.conversation_config(recognizer_pb2.EndpointingConfig.MODE_SEMANTIC)
    c.output_format.sample_rate_hz = rate
    c.language = language
    return c


with tempfile.TemporaryDirectory() as tmp:
    fleet = LocalFleet.on_free_ports(
        tmp, services=("asr", "brain", "moss_sts", "router"), moss_sts={"default_max_tokens": 32}
    )
    try:
        ts = build(23)
        lines = [ts.line(i) for i in ts.complete[: int(sys.argv[1])]]
        res = {k: [] for k in VARIANTS}
        with grpc.insecure_channel(fleet.config.router.address) as ch:
            for n, line in enumerate(lines):
                for name, v in VARIANTS.items():
                    caller = Caller(ch, cfg(**v))
                    try:
                        rec = endpointing_line(caller, line, f"{name}-{n}")
                    finally:
                        caller.close()
                    tm = [e.turn_complete.timings for _, e in caller.events if e.WhichOneof("event") == "turn_complete"]
                    t = tm[0] if tm else None
                    res[name].append(t.speech_end_to_first_audio_ms if t else None)
                    print(
                        name,
                        n,
                        "client",
                        round(1000 * (rec.get("speech_end_to_first_audio_s") or 0)),
                        "server",
                        t
                        and (
                            t.speech_end_to_commit_ms,
                            t.transcript_to_first_text_ms,
                            t.speech_end_to_first_audio_ms,
                            t.preemptive,
                        ),
                        flush=True,
                    )
        import statistics

        for k, v in res.items():
            v = [x for x in v if x]
            print(k, "median server first audio", statistics.median(v) if v else None)
    finally:
        fleet.stop()
