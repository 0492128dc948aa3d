"""ctypes binding to libespeak-ng 1.52 as shipped in the ``espeakng-loader`` wheel (library + espeak-ng-data).

espeak-ng keeps one synthesizer per process: one synthesis callback, one current voice, one set of parameters.
So this module owns exactly one ``Espeak`` per process and one worker thread that makes every espeak call; jobs
run one after another in submission order (the thread's queue is the engine's queue).

Synchronous mode (``AUDIO_OUTPUT_SYNCHRONOUS``): ``espeak_Synth`` returns when the text is spoken; meanwhile
espeak calls the synthesis callback with each buffer of ``buflength`` ms of 16-bit mono PCM (22.05 kHz). A
callback that returns 1 makes espeak stop at once: that is how a cancelled stream stops within one callback.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

log = logging.getLogger("voicefleet.espeak")

# espeak_AUDIO_OUTPUT, espeak_POSITION_TYPE, espeak_PARAMETER and synth flags (speak_lib.h, espeak-ng 1.52).
AUDIO_OUTPUT_SYNCHRONOUS = 2
POS_CHARACTER = 1
ESPEAK_RATE = 1
CHARS_UTF8 = 1
ENDPAUSE = 0x1000
EE_OK, EE_INTERNAL_ERROR, EE_BUFFER_FULL, EE_NOT_FOUND = 0, -1, 1, 2
INITIALIZE_DONT_EXIT = 0x8000
# Words per minute at speaking_rate 1.0 (espeak's own default) and the range espeak accepts.
DEFAULT_WPM, MIN_WPM, MAX_WPM = 175, 80, 450


class _Voice(ctypes.Structure):
    # espeak_VOICE
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_void_p),  # (priority byte, NUL-terminated tag)*, then a 0 byte
        ("identifier", ctypes.c_char_p),  # file under espeak-ng-data/voices or lang, e.g. "gmw/en-US"
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


_SynthCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


@dataclass(frozen=True)
class EspeakVoice:
    """One entry of espeak_ListVoices."""

    name: str  # "English (America)"
    identifier: str  # "gmw/en-US"
    languages: tuple[str, ...]  # espeak's tags in its priority order, lower-case as espeak writes them
    gender: int  # 0 unknown, 1 male, 2 female

    @property
    def short_id(self) -> str:
        """The identifier's last part ("en-US", "cmn"): what `espeak-ng -v` takes."""
        return self.identifier.rsplit("/", 1)[-1]


@dataclass
class SynthJob:
    """One text for espeak, and where its audio goes. ``sink`` is called on the espeak thread."""

    text: str
    voice: str  # an espeak voice name for espeak_SetVoiceByName, e.g. "gmw/en-US" or "sit/cmn+f2"
    words_per_minute: int
    sink: Callable[[bytes], None]
    seed: int = 1  # espeak_ng_SetRandSeed: espeak's noise source (aspiration, fricatives)
    cancelled: threading.Event = field(default_factory=threading.Event)
    submitted_at: float = field(default_factory=time.monotonic)
    # Filled by the espeak thread.
    started_at: float = 0.0
    finished_at: float = 0.0
    callbacks: int = 0
    samples: int = 0
    aborted: bool = False


class EspeakError(RuntimeError):
    pass


class _Library:
    """One loaded instance of libespeak-ng: its handle, its C signatures, and espeak initialised in it."""

    def __init__(self, path: str, data_path: str, callback_ms: int, callback):
        lib = ctypes.CDLL(path)
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Info.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
        lib.espeak_Info.restype = ctypes.c_char_p
        lib.espeak_ListVoices.argtypes = [ctypes.c_void_p]
        lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_Voice))
        lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
        lib.espeak_ng_SetRandSeed.restype = ctypes.c_int
        lib.espeak_Terminate.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int
        self.lib = lib
        # DONT_EXIT: a bad data path returns an error instead of espeak calling exit(1) on the whole server.
        rate = lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, callback_ms, data_path.encode(), INITIALIZE_DONT_EXIT)
        if rate <= 0:
            self.unload()
            raise EspeakError(f"espeak_Initialize failed ({rate}) with data at {data_path}")
        self.sample_rate = rate
        path_out = ctypes.c_char_p()
        self.version = (lib.espeak_Info(ctypes.byref(path_out)) or b"?").decode()
        lib.espeak_SetSynthCallback(callback)
        self.voice: str | None = None

    def unload(self) -> None:
        """Terminate espeak and unload the library, so the next load starts from espeak's initial state."""
        import _ctypes

        with contextlib.suppress(Exception):
            self.lib.espeak_Terminate()
        _ctypes.dlclose(self.lib._handle)


class Espeak:
    """The process's espeak-ng. Construct with ``Espeak.shared()``; call its methods only on ``Espeak.thread``.

    Determinism: espeak-ng 1.52 keeps synthesis state in C statics between utterances (pitch-flutter index,
    gain control, wave phase) that neither espeak_Terminate nor espeak_ng_SetRandSeed resets, and seeds its noise
    from time(NULL). So the same text gives slightly different PCM on each call within one process. With
    ``fresh_per_job`` (the default) every job loads the library afresh (dlopen, initialise, seed, speak,
    terminate, dlclose: about 5 ms), so each job starts from the same state and its PCM is bit-identical run to
    run. Without it one instance stays loaded (no per-job cost; PCM varies by a few ms of timing).
    """

    _instance: Espeak | None = None
    _instance_lock = threading.Lock()
    #: The one thread that talks to libespeak-ng.
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="espeak")

    def __init__(self, callback_ms: int, fresh_per_job: bool = True):
        import espeakng_loader

        self.library_path = espeakng_loader.get_library_path()
        self.data_path = espeakng_loader.get_data_path()
        self.callback_ms = callback_ms
        self.fresh_per_job = fresh_per_job
        self._job: SynthJob | None = None
        # Kept referenced for the life of the process: espeak holds the raw function pointer.
        self._callback = _SynthCallback(self._on_audio)
        lib = self._load()
        self.sample_rate, self.version = lib.sample_rate, lib.version
        self._lib: _Library | None = None
        if fresh_per_job:
            lib.unload()
        else:
            self._lib = lib
        log.info(
            "espeak-ng %s at %s, %d Hz, %d ms per callback, %s",
            self.version,
            self.data_path,
            self.sample_rate,
            callback_ms,
            "fresh library per job (deterministic)" if fresh_per_job else "one library for all jobs",
        )

    def _load(self) -> _Library:
        return _Library(self.library_path, self.data_path, self.callback_ms, self._callback)

    @classmethod
    def shared(cls, callback_ms: int, fresh_per_job: bool = True) -> Espeak:
        """The process's instance, initialised on first use (call on ``Espeak.thread``)."""
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls(callback_ms, fresh_per_job)
            elif (cls._instance.callback_ms, cls._instance.fresh_per_job) != (callback_ms, fresh_per_job):
                log.warning(
                    "espeak is already set up in this process (%d ms callbacks, fresh_per_job=%s); ignoring %d ms, %s",
                    cls._instance.callback_ms,
                    cls._instance.fresh_per_job,
                    callback_ms,
                    fresh_per_job,
                )
            return cls._instance

    # --- voices -------------------------------------------------------------------------------------------------
    def list_voices(self, variants: bool = False) -> list[EspeakVoice]:
        """espeak_ListVoices: every language voice (or, with ``variants``, the voice variants such as f2, m3)."""
        lib = self._lib or self._load()
        try:
            spec = None
            if variants:
                spec = _Voice()
                tag = ctypes.create_string_buffer(b"variant")
                spec.languages = ctypes.cast(tag, ctypes.c_void_p)
            listed = lib.lib.espeak_ListVoices(ctypes.byref(spec) if spec is not None else None)
            voices, i = [], 0
            while listed[i]:
                v = listed[i].contents
                voices.append(
                    EspeakVoice(
                        name=(v.name or b"").decode("utf-8", "replace").strip(),
                        identifier=(v.identifier or b"").decode("utf-8", "replace"),
                        languages=_languages(v.languages),
                        gender=v.gender,
                    )
                )
                i += 1
            return voices
        finally:
            if lib is not self._lib:
                lib.unload()

    # --- synthesis ----------------------------------------------------------------------------------------------
    def run(self, job: SynthJob) -> SynthJob:
        """Speak ``job.text`` (on the espeak thread); the sink gets each callback's PCM as it comes."""
        job.started_at = time.monotonic()
        lib = None
        try:
            if job.cancelled.is_set():
                job.aborted = True
                return job
            lib = self._lib or self._load()
            if job.voice != lib.voice:
                code = lib.lib.espeak_SetVoiceByName(job.voice.encode())
                if code != EE_OK:
                    lib.voice = None
                    raise EspeakError(f"espeak_SetVoiceByName({job.voice!r}) failed with code {code}")
                lib.voice = job.voice
            wpm = max(MIN_WPM, min(MAX_WPM, job.words_per_minute))
            lib.lib.espeak_SetParameter(ESPEAK_RATE, wpm, 0)
            lib.lib.espeak_ng_SetRandSeed(job.seed)
            text = job.text.replace("\0", " ").encode("utf-8") + b"\0"
            self._job = job
            try:
                code = lib.lib.espeak_Synth(text, len(text), 0, POS_CHARACTER, 0, CHARS_UTF8 | ENDPAUSE, None, None)
            finally:
                self._job = None
            if code != EE_OK:
                raise EspeakError(f"espeak_Synth failed with code {code}")
            return job
        finally:
            if lib is not None and lib is not self._lib:
                lib.unload()
            job.finished_at = time.monotonic()

    def _on_audio(self, wav, numsamples: int, _events) -> int:
        job = self._job
        if job is None:
            return 1
        if job.cancelled.is_set():
            job.aborted = True
            return 1  # espeak stops synthesizing this text now
        if wav and numsamples > 0:
            job.callbacks += 1
            job.samples += numsamples
            job.sink(ctypes.string_at(wav, numsamples * 2))
        return 0


def _languages(pointer: int | None) -> tuple[str, ...]:
    """Decode espeak_VOICE.languages: (priority byte, NUL-terminated tag)* ending with a 0 byte."""
    if not pointer:
        return ()
    raw = ctypes.cast(pointer, ctypes.POINTER(ctypes.c_ubyte))
    tags, i = [], 0
    while raw[i] != 0:
        i += 1  # priority (lower is preferred; espeak lists them in its own order)
        start = i
        while raw[i] != 0:
            i += 1
        tags.append(bytes(raw[start:i]).decode("ascii", "replace"))
        i += 1
    return tuple(tags)


def bcp47(tag: str) -> str:
    """espeak's lower-case tags in BCP-47 letter case: en-gb-x-rp -> en-GB-x-rp, cmn-latn-pinyin -> cmn-Latn-pinyin."""
    parts = tag.split("-")
    out = [parts[0].lower()]
    private = False
    for part in parts[1:]:
        if private or len(part) == 1:
            private = private or part.lower() == "x"
            out.append(part.lower())
        elif len(part) == 2 and part.isalpha():
            out.append(part.upper())
        elif len(part) == 4 and part.isalpha():
            out.append(part.title())
        else:
            out.append(part.lower())
    return "-".join(out)
