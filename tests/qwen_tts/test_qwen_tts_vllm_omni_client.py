"""qwen_tts's vLLM-Omni engine (the streaming GPU path) against ``VllmOmniDouble``: a TEST DOUBLE at the network
boundary - a small local HTTP server that speaks vllm-omni 0.30's wire format (GET /health, GET /v1/audio/voices,
POST /v1/audio/speech with stream=true -> text/event-stream of speech.audio.delta / .done / .error events, chunked
transfer encoding, as uvicorn sends them). It stands in for the GPU sidecar only; the engine code under test is
the real one, and the real sidecar is exercised by tests/qwen_tts/test_qwen_tts_gpu.py on a GPU machine.

The double's audio is a deterministic synthetic signal (24 kHz s16le, 1920 samples per 12.5 Hz codec frame), so
the tests can check the engine hands on exactly the bytes the server sent, chunk by chunk.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import numpy as np
import pytest

from services.common.config.base import ChunkingConfig
from services.common.config.qwen_tts import QwenGpuConfig
from services.common.engines import SynthesisOptions
from services.common.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable, VoiceError
from services.engines import qwen_presets as presets
from services.qwen_tts.vllm_omni_engine import ASLEEP_ESTIMATE_BYTES, VllmOmniTtsEngine, request_groups
from tests.conftest import start_fleet
from voice.v1 import synthesizer_pb2, synthesizer_pb2_grpc

FRAME = 1920  # samples per codec frame: 24000 Hz / 12.5 Hz
STEADY_FRAMES = 25  # vllm-omni's qwen3_tts.yaml codec_chunk_frames


def double_pcm(text: str) -> bytes:
    """What the double 'speaks' for a text: one 80 ms tone frame per two characters (at least 3 frames)."""
    frames = max(3, len(text) // 2)
    t = np.arange(frames * FRAME) / 24000
    freq = 200 + (np.repeat(np.arange(frames), FRAME) * 37 + sum(map(ord, text))) % 600
    return (0.3 * np.sin(2 * np.pi * freq * t) * 32767).astype(np.int16).tobytes()


class VllmOmniDouble:
    """TEST DOUBLE of a vLLM-Omni Qwen3-TTS CustomVoice sidecar (see the module docstring)."""

    speakers = ["aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian"]

    def __init__(self, chunk_delay: float = 0.0):
        self.chunk_delay = chunk_delay
        # Lockstep: with hold_after set, the double sends that many chunks of a stream, then waits for `release`
        # before the rest (a test orders its cancel before the sidecar's next write, no clock involved).
        self.hold_after: int | None = None
        self.release = threading.Event()
        self.requests: list[dict] = []
        self.chunks_sent = 0
        self.chunks_total = 0  # chunks each stream would have had, summed
        self.disconnects = 0
        self.fail_with: str | None = None  # "http500" | "midstream" | "no_done"
        self.odd_split = False
        # "data_only": events as `data: {"type": ...}` lines without `event:` and a closing `data: [DONE]` (OpenAI's
        # speech stream format); "no_streaming": a vLLM-Omni from before streaming speech (400 on stream_format sse,
        # whole PCM otherwise).
        self.dialect = "event_lines"
        self.controls: list[tuple[str, object]] = []  # sleep / wakeup / resume calls, in order
        self.asleep = self.paused = False
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _json(self, status: int, payload: dict) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/health":
                    self._json(200, {})
                elif self.path == "/v1/audio/voices":
                    uploaded = [{"name": "my_upload", "consent": "c1", "ref_text": "hi"}]  # a clone: not ours
                    self._json(200, {"voices": [*double.speakers, "my_upload"], "uploaded_voices": uploaded})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"null")
                if self.path in ("/v1/omni/sleep", "/v1/omni/wakeup", "/resume"):
                    return self._control(body)
                double.requests.append(body)
                if double.asleep or double.paused:  # vLLM-Omni would hold it at admission; the test fails loudly
                    return self._json(503, {"error": {"message": "asleep", "code": 503}})
                if body.get("stream") and body.get("response_format") not in ("pcm", "wav"):
                    return self._json(400, {"error": {"message": "stream=true requires pcm or wav", "code": 400}})
                if double.fail_with == "http500":
                    return self._json(500, {"error": {"message": "CUDA out of memory", "code": 500}})
                if double.dialect == "no_streaming":
                    if body.get("stream_format") == "sse":
                        message = "'sse' is not a supported stream_format yet. Please use 'audio'."
                        return self._json(400, {"error": {"message": message, "code": 400}})
                    pcm = double_pcm(body["input"])
                    self.send_response(200)
                    self.send_header("Content-Type", "audio/pcm")
                    self.send_header("Content-Length", str(len(pcm)))
                    self.end_headers()
                    self.wfile.write(pcm)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                pcm = double_pcm(body["input"])
                first = body.get("initial_codec_chunk_frames") or STEADY_FRAMES
                bounds, pos, size = [], 0, first * FRAME * 2
                while pos < len(pcm):
                    end = min(len(pcm), pos + size) + (1 if double.odd_split and pos + size < len(pcm) else 0)
                    bounds.append((pos, end))
                    pos, size = end, STEADY_FRAMES * FRAME * 2
                double.chunks_total += len(bounds)
                try:
                    for i, (a, b) in enumerate(bounds):
                        if double.hold_after is not None and i == double.hold_after:
                            double.release.wait(30)
                        if double.fail_with == "midstream" and i == 1:
                            self._event(
                                "speech.audio.error", {"type": "speech.audio.error", "error": {"message": "boom"}}
                            )
                            break
                        payload = {"type": "speech.audio.delta", "audio": base64.b64encode(pcm[a:b]).decode()}
                        self._event("speech.audio.delta", {**payload, "response_format": "pcm"})
                        double.chunks_sent += 1
                        time.sleep(double.chunk_delay)
                    else:
                        if double.fail_with != "no_done":
                            self._event("speech.audio.done", {"type": "speech.audio.done", "usage": {}})
                        if double.dialect == "data_only":
                            self._chunk(b"data: [DONE]\n\n")
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    double.disconnects += 1
                    self.close_connection = True

            def _control(self, body) -> None:
                """vllm-omni 0.30's /v1/omni/sleep and /v1/omni/wakeup ({stage_ids, level}) and vLLM's /resume."""
                double.controls.append((self.path, body))
                if self.path == "/v1/omni/sleep":
                    double.asleep = double.paused = True
                elif self.path == "/v1/omni/wakeup":
                    double.asleep = False  # admission stays closed until /resume, as in AsyncOmni.wake_up
                else:
                    double.paused = False
                self._json(200, {"status": "SUCCESS"})

            def _event(self, name: str, payload: dict) -> None:
                line = "" if double.dialect == "data_only" else f"event: {name}\n"
                self._chunk(f"{line}data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode())

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def double():
    d = VllmOmniDouble()
    yield d
    d.close()


def gpu_config(url: str, **kw) -> QwenGpuConfig:
    return QwenGpuConfig(**{"backend": "vllm_omni", "base_url": url, "launch_sidecar": False, **kw})


async def started(url: str, **kw) -> VllmOmniTtsEngine:
    engine = VllmOmniTtsEngine("qwen_tts_test", ChunkingConfig(), gpu_config(url, **kw))
    await engine.start()
    return engine


async def speak(engine, text, **options):
    return [p async for p in engine.synthesize(text, SynthesisOptions(**options))]


async def test_voices_are_the_sidecars_presets(double):
    engine = await started(double.url)
    try:
        voices = await engine.voices()
        assert [v.id for v in voices] == [p.id for p in presets.PRESETS]  # Qwen's spelling and order
        vivian = voices[0]
        assert vivian.languages[:3] == ("zh", "zh-CN", "cmn") and "en-US" in vivian.languages
        assert vivian.native_sample_rate_hz == 24000 and vivian.engine == "vllm_omni"
        assert "Qwen3-TTS preset speaker" in vivian.description
        sohee = next(v for v in voices if v.id == "Sohee")
        assert sohee.languages[0] == "ko"
    finally:
        await engine.close()


async def test_streams_the_sidecars_pcm_with_a_small_first_chunk(double):
    engine = await started(double.url, initial_codec_chunk_frames=2)
    try:
        text = "Hello from the streaming engine, this is a longer sentence to make several chunks of audio."
        pieces = await speak(engine, text, voice="Ryan", language="en-US")
        request = double.requests[-1]
        assert request == {
            "input": text,
            "voice": "ryan",
            "language": "English",
            "task_type": "CustomVoice",
            "response_format": "pcm",
            "stream": True,
            "stream_format": "sse",
            "initial_codec_chunk_frames": 2,
            "seed": 1234,
        }
        assert b"".join(p.pcm for p in pieces) == double_pcm(text)
        assert len(pieces[0].pcm) == 2 * FRAME * 2  # two codec frames: 160 ms
        assert len(pieces[1].pcm) == STEADY_FRAMES * FRAME * 2
        assert {(p.text_start, p.text_end) for p in pieces} == {(0, len(text))}
        assert {p.sample_rate_hz for p in pieces} == {24000}
        # Native language by default; a request seed overrides the default one.
        await speak(engine, "你好。", voice="Vivian", seed=7)
        assert double.requests[-1]["language"] == "Chinese" and double.requests[-1]["seed"] == 7
    finally:
        await engine.close()


async def test_odd_sized_deltas_are_reassembled_into_whole_samples(double):
    double.odd_split = True
    engine = await started(double.url)
    try:
        text = "A sentence long enough for several deltas of audio from the double, cut at odd byte offsets."
        pieces = await speak(engine, text, voice="Aiden")
        assert all(len(p.pcm) % 2 == 0 for p in pieces)
        assert b"".join(p.pcm for p in pieces) == double_pcm(text)[: len(b"".join(p.pcm for p in pieces))]
        assert len(b"".join(p.pcm for p in pieces)) >= len(double_pcm(text)) - 2
    finally:
        await engine.close()


def test_long_text_becomes_several_requests_at_sentence_ends():
    text = "One short sentence. " * 30
    groups = request_groups(text.strip(), 100)
    assert len(groups) > 5 and all(b - a <= 100 for a, b in groups)
    assert all(text.strip()[b - 1] == "." for _, b in groups)


async def test_long_text_is_streamed_in_order(double):
    engine = await started(double.url, max_request_chars=60)
    try:
        text = "First sentence here. Second sentence is here. Third one. Fourth and last sentence of it."
        pieces = await speak(engine, text, voice="Ryan")
        inputs = [r["input"] for r in double.requests[1:]]  # [0] is the warm-up
        assert len(inputs) >= 2 and " ".join(inputs) == text
        assert b"".join(p.pcm for p in pieces) == b"".join(double_pcm(i) for i in inputs)
        spans = [(p.text_start, p.text_end) for p in pieces]
        assert spans == sorted(spans) and spans[-1][1] == len(text)
    finally:
        await engine.close()


async def test_cancel_closes_the_http_stream_and_the_sidecar_stops_sending(double):
    engine = await started(double.url)
    try:
        text = "word " * 400  # 1000 frames: 41 chunks
        sent_before, total_before = double.chunks_sent, double.chunks_total
        double.hold_after = 1  # the sidecar sends the first chunk, then waits until the client has gone
        agen = engine.synthesize(text, SynthesisOptions(voice="Ryan"))
        await agen.__anext__()
        await agen.aclose()
        double.release.set()  # the sidecar goes on writing: to a closed connection
        for _ in range(100):  # its next writes fail: it counts the disconnect and stops
            if double.disconnects:
                break
            await asyncio.sleep(0.05)
        assert double.disconnects == 1, "the sidecar saw the client go away"
        sent, total = double.chunks_sent - sent_before, double.chunks_total - total_before
        # The held first chunk, and at most the one write the kernel took before the peer's reset: not the 41.
        assert total == 41 and sent <= 2, f"the sidecar streamed {sent} of {total} chunks for a cancelled call"
    finally:
        await engine.close()


async def test_errors_become_clear_statuses(double):
    engine = await started(double.url)
    try:
        with pytest.raises(InvalidArgument, match="config.speaking_rate"):
            await speak(engine, "hi", voice="Ryan", speaking_rate=1.5)
        with pytest.raises(InvalidArgument, match="config.language: voice 'Ryan' does not speak 'sw'"):
            await speak(engine, "hi", voice="Ryan", language="sw")
        with pytest.raises(NotFound, match="config.voice: 'joe'"):
            await speak(engine, "hi", voice="joe")
        double.fail_with = "http500"
        with pytest.raises(Unavailable, match="CUDA out of memory"):
            await speak(engine, "hi", voice="Ryan")
        double.fail_with = "midstream"
        with pytest.raises(VoiceError, match="failed mid-stream: boom"):
            await speak(engine, "word " * 100, voice="Ryan")
        double.fail_with = "no_done"
        with pytest.raises(Unavailable, match="without speech.audio.done"):
            await speak(engine, "hi there", voice="Ryan")
    finally:
        await engine.close()
    double.close()
    engine = VllmOmniTtsEngine(
        "qwen_tts_test", ChunkingConfig(), gpu_config(double.url, sidecar_start_timeout_seconds=1)
    )
    with pytest.raises(Unavailable, match="not healthy after 1s"):
        await engine.start()
    await engine.close()


def test_qwen_tts_service_on_the_vllm_omni_engine_through_the_router(double, tmp_path):
    fleet = start_fleet(
        tmp_path,
        services=("qwen_tts", "router"),
        qwen_tts={"engine": "gpu", "gpu": {"backend": "vllm_omni", "launch_sidecar": False, "base_url": double.url}},
    )
    try:
        with fleet.channel("router") as channel:
            stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
            voices = stub.ListVoices(synthesizer_pb2.ListVoicesRequest(service="qwen_tts"), timeout=10).voices
            assert {v.engine for v in voices} == {"vllm_omni"} and voices[0].id == "Vivian"
            text = "Streaming through the router to the sidecar."
            request = synthesizer_pb2.SynthesizeRequest(
                text=text, config=synthesizer_pb2.SynthesisConfig(voice="Vivian", language="en")
            )
            replies = list(stub.Synthesize(request, timeout=20))
            assert {r.served_by for r in replies} == {"qwen_tts/vllm_omni"}
            assert b"".join(r.audio.data for r in replies) == double_pcm(text)
            assert {r.audio.format.sample_rate_hz for r in replies} == {24000}
            bad = synthesizer_pb2.SynthesizeRequest(
                text=text, config=synthesizer_pb2.SynthesisConfig(voice="Vivian", speaking_rate=1.5)
            )
            with pytest.raises(grpc.RpcError) as err:
                list(stub.Synthesize(bad, timeout=20))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "config.speaking_rate" in err.value.details()
    finally:
        fleet.fleet.stop()


async def test_a_new_streams_first_request_goes_before_a_running_streams_next_one(double):
    """The scheduler in front of the sidecar (one request in flight here): while stream A speaks its first request,
    stream B arrives; B's first request is sent before A's second, since A is seconds ahead of playback."""
    from services.common.config.base import SchedulingConfig

    engine = VllmOmniTtsEngine(
        "qwen_tts_test",
        ChunkingConfig(),
        gpu_config(double.url, max_request_chars=60),
        SchedulingConfig(workers=1),
    )
    await engine.start()
    double.chunk_delay = 0.05
    try:
        a_text = "First sentence of the long answer is here. Second sentence of that answer follows it."
        b_text = "Hello there."
        a = engine.synthesize(a_text, SynthesisOptions(voice="Ryan"))
        a_pieces = [await a.__anext__()]  # A's first request is streaming now
        b_task = asyncio.create_task(speak(engine, b_text, voice="Vivian"))
        await asyncio.sleep(0.1)  # B is in line before A asks for its second request
        a_pieces += [p async for p in a]
        b_pieces = await b_task
        inputs = [r["input"] for r in double.requests[1:]]  # [0] is the warm-up
        a_first, a_second = (s.strip() for s in (a_text[:43], a_text[43:]))
        assert inputs == [a_first, b_text, a_second]
        assert b"".join(p.pcm for p in b_pieces) == double_pcm(b_text)
        assert b"".join(p.pcm for p in a_pieces) == double_pcm(a_first) + double_pcm(a_second)
    finally:
        await engine.close()


@pytest.mark.parametrize("dialect", ["data_only", "no_streaming"])
async def test_older_and_openai_style_sidecars_give_the_same_audio(double, dialect):
    """Event type from the JSON when there is no `event:` line ([DONE] accepted); a sidecar that cannot stream
    speech is served whole-utterance instead of failing every request."""
    text = "Hello there. This is a second sentence."
    engine = await started(double.url)
    expected = b"".join(p.pcm for p in await speak(engine, text, voice="Ryan"))
    double.dialect = dialect
    got = await speak(engine, text, voice="Ryan")
    assert b"".join(p.pcm for p in got) == expected
    if dialect == "no_streaming":
        assert len(got) == 1 and not engine._sse
    await engine.close()


def test_deploy_config_stages_are_sized_to_the_lease(tmp_path, monkeypatch):
    """Each stage keeps its share of the other stages; together they take the lease's bytes of the card."""
    import yaml

    from services.residency import gpu_host

    deploy = tmp_path / "qwen3_tts.yaml"
    deploy.write_text(
        yaml.safe_dump(
            {
                "stages": [
                    {"name": "talker", "gpu_memory_utilization": 0.3},
                    {"name": "code2wav", "gpu_memory_utilization": 0.1},
                ]
            }
        )
    )
    monkeypatch.setattr(gpu_host, "device_total_bytes", lambda index=0: 24 << 30)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    engine = VllmOmniTtsEngine(
        "qwen_tts_test", ChunkingConfig(), gpu_config("http://127.0.0.1:1"), memory_budget_bytes=6 << 30
    )
    sized = yaml.safe_load(engine._sized_deploy_config(deploy).read_text())
    shares = [stage["gpu_memory_utilization"] for stage in sized["stages"]]
    assert shares == [pytest.approx(0.1875), pytest.approx(0.0625)]  # 6/24 of the card, split 3:1


async def test_offload_puts_the_sidecar_to_sleep_and_reload_wakes_and_resumes_it(double):
    """A sidecar run in sleep mode (the engine's deploy copy sets enable_sleep_mode): offload = vllm-omni's level-1
    sleep of every stage, reload = wake-up, then vLLM's /resume (admission stays closed after an AR stage wakes)."""
    engine = await started(double.url)
    engine._sidecar, engine._sleep_stages = object(), [0, 1]  # as after _launch_sidecar with our deploy copy
    engine.memory_budget_bytes = 6 << 30
    try:
        before = b"".join(p.pcm for p in await speak(engine, "Hello there.", voice="Vivian", seed=3))
        assert engine.resident_bytes() == 6 << 30
        await engine.offload()
        # asleep is not 0: contexts and CUDA graphs stay (estimated here, where NVML sees no sidecar process)
        assert double.asleep and engine.resident_bytes() == 2 * ASLEEP_ESTIMATE_BYTES
        await engine.reload()
        assert [c[0] for c in double.controls] == ["/v1/omni/sleep", "/v1/omni/wakeup", "/resume"]
        assert double.controls[0][1] == {"stage_ids": [0, 1], "level": 1}
        assert double.controls[1][1] == {"stage_ids": [0, 1]}
        after = b"".join(p.pcm for p in await speak(engine, "Hello there.", voice="Vivian", seed=3))
        assert after == before and engine.resident_bytes() == 6 << 30
    finally:
        engine._sidecar = None
        await engine.close()


async def test_a_sidecar_run_by_someone_else_is_not_put_to_sleep(double):
    engine = await started(double.url)
    try:
        await engine.offload()
        await engine.reload()
        assert double.controls == []  # nothing sent: it may not run in sleep mode; the log says it stays resident
        assert await speak(engine, "Still here.", voice="Vivian")
    finally:
        await engine.close()


def test_deploy_copy_turns_sleep_mode_on_in_every_stage(tmp_path, monkeypatch):
    import yaml

    deploy = tmp_path / "qwen3_tts.yaml"
    deploy.write_text(yaml.safe_dump({"stages": [{"stage_id": 0}, {"stage_id": 1}]}))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    engine = VllmOmniTtsEngine("qwen_tts_test", ChunkingConfig(), gpu_config("http://127.0.0.1:1"))
    copy = yaml.safe_load(engine._sized_deploy_config(deploy).read_text())
    assert [s["enable_sleep_mode"] for s in copy["stages"]] == [True, True]
    assert engine._sleep_stages == [0, 1]


def stock_qwen3_tts_deploy(path):
    """vllm-omni's qwen3_tts.yaml as the issue read it: two stages of 0.3 of the card, the talker with vLLM's
    stock max_model_len 65536 and max_num_seqs 64."""
    import yaml

    stage = {"gpu_memory_utilization": 0.3, "max_model_len": 65536, "max_num_seqs": 64}
    path.write_text(
        yaml.safe_dump(
            {
                "stages": [
                    {"stage_id": 0, "engine_args": {"model_stage": "talker", **stage}},
                    {"stage_id": 1, "engine_args": {"model_stage": "code2wav", "gpu_memory_utilization": 0.3}},
                ]
            }
        )
    )
    return path


def talker_checkpoint(model_dir, weights_bytes: int):
    """A checkpoint directory with the 1.7B talker's attention shape (28 layers, 8 KV heads of 128) and weights of
    ``weights_bytes`` (a sparse file: only its size is read)."""
    model_dir.mkdir()
    talker = {"num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128}
    (model_dir / "config.json").write_text(json.dumps({"talker_config": {**talker, "hidden_size": 2048}}))
    with open(model_dir / "model.safetensors", "wb") as f:
        f.truncate(weights_bytes)
    return str(model_dir)


def test_the_talkers_kv_is_sized_from_its_share_and_the_room_is_said(tmp_path, monkeypatch, caplog):
    """A 6 GB lease on a 24 GB card: the talker's stage gets 3 GiB; 1 GiB of weights and 1 GiB of overhead leave
    1 GiB of KV room = 9362 tokens at 112 KiB: max_model_len 9216 (not the stock 65536, which vLLM would refuse),
    18 sequences of 512 tokens."""
    import yaml

    from services.residency import gpu_host

    monkeypatch.setattr(gpu_host, "device_total_bytes", lambda index=0: 24 << 30)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    model_dir = talker_checkpoint(tmp_path / "model", 1 << 30)
    engine = VllmOmniTtsEngine(
        "qwen_tts_test",
        ChunkingConfig(),
        gpu_config("http://127.0.0.1:1", model_dir=model_dir),
        memory_budget_bytes=6 << 30,
    )
    with caplog.at_level("INFO"):
        sized = yaml.safe_load(engine._sized_deploy_config(stock_qwen3_tts_deploy(tmp_path / "d.yaml")).read_text())
    talker, code2wav = (s["engine_args"] for s in sized["stages"])
    assert (talker["max_model_len"], talker["max_num_seqs"]) == (9216, 18)
    assert "max_model_len" not in code2wav
    assert [p.tokens for p in engine.kv_plans] == [(1 << 30) // (2 * 28 * 8 * 128 * 2)]
    assert "KV room 1.00 GiB = 9362 tokens at 112 KiB/token" in caplog.text


def test_a_lease_too_small_for_the_talkers_kv_is_refused_at_start_with_the_numbers(tmp_path, monkeypatch):
    from services.residency import gpu_host

    monkeypatch.setattr(gpu_host, "device_total_bytes", lambda index=0: 24 << 30)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    model_dir = talker_checkpoint(tmp_path / "model", int(1.8 * 2**30))
    engine = VllmOmniTtsEngine(
        "qwen_tts_test",
        ChunkingConfig(),
        gpu_config("http://127.0.0.1:1", model_dir=model_dir),
        memory_budget_bytes=6 << 30,
    )
    with pytest.raises(FailedPrecondition) as refused:
        engine._sized_deploy_config(stock_qwen3_tts_deploy(tmp_path / "d.yaml"))
    message = str(refused.value)
    assert "declared_gb" in message and "KV room 0.20 GiB = 1872 tokens" in message
    assert "needs >= 4096 tokens" in message and "raise the lease by >= 0.24 GiB" in message


@pytest.fixture
def sidecar_tree():
    """A real process with a child, as a sidecar with its engine core: (the Popen, the child's pid)."""
    import subprocess
    import sys

    from services.residency import gpu_host

    sidecar = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', 'input()'])"],
        stdin=subprocess.PIPE,
    )
    try:
        while len(gpu_host.process_tree(sidecar.pid)) < 2:
            time.sleep(0.01)
        (child,) = gpu_host.process_tree(sidecar.pid) - {sidecar.pid}
        yield sidecar, child
    finally:
        sidecar.stdin.close()  # the child's input() ends, then the parent
        sidecar.wait(timeout=30)


async def test_asleep_reports_what_the_sidecars_processes_still_hold(double, monkeypatch, sidecar_tree):
    """The lease table gets the sidecar's measured bytes: its whole process tree's (vLLM's engine core is a child of
    a child), read from NVML. NVML needs a driver: gpu_bytes_by_pid is replaced by a test double that answers for
    a real process tree started here, plus a process of someone else's that must not be counted."""
    from services.residency import gpu_host

    sidecar, engine_core = sidecar_tree
    held = {engine_core: 700 << 20, sidecar.pid: 300 << 20, 1: 5 << 30}
    monkeypatch.setattr(gpu_host, "gpu_bytes_by_pid", lambda: held)  # test double: NVML
    engine = await started(double.url)
    engine._sidecar, engine._sleep_stages = sidecar, [0, 1]
    try:
        await engine.offload()
        assert double.asleep and engine.resident_bytes() == 1000 << 20
        held[engine_core] = 6 << 30
        await engine.reload()
        assert engine.resident_bytes() == (6 << 30) + (300 << 20)
    finally:
        engine._sidecar = None
        await engine.close()
