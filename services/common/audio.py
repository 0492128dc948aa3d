"""Audio on the wire: s16le mono PCM, format checks, resampling (soxr), chunking, WAV files."""

from __future__ import annotations

import io
import math
import wave
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import soxr

from services.common.errors import InvalidArgument
from voice.v1 import audio_pb2

MIN_RATE_HZ = 8_000
MAX_RATE_HZ = 48_000
BYTES_PER_SAMPLE = 2
S16LE = audio_pb2.AUDIO_ENCODING_LINEAR_PCM_S16LE


@dataclass(frozen=True)
class PcmFormat:
    """A validated s16le mono format."""

    sample_rate_hz: int

    def to_proto(self) -> audio_pb2.AudioFormat:
        return audio_pb2.AudioFormat(encoding=S16LE, sample_rate_hz=self.sample_rate_hz, channels=1)

    def duration_s(self, pcm: bytes) -> float:
        return len(pcm) / BYTES_PER_SAMPLE / self.sample_rate_hz

    def bytes_for_ms(self, ms: float) -> int:
        return max(1, int(self.sample_rate_hz * ms / 1000)) * BYTES_PER_SAMPLE


def check_rate(field: str, rate: int) -> None:
    if not MIN_RATE_HZ <= rate <= MAX_RATE_HZ:
        raise InvalidArgument(field, f"{rate} Hz is outside {MIN_RATE_HZ}..{MAX_RATE_HZ} Hz")


def output_format(field: str, fmt: audio_pb2.AudioFormat | None, native_rate: int) -> PcmFormat:
    """The format a client asked to receive. Unset rate means the engine's native rate."""
    if fmt is None or (fmt.sample_rate_hz == 0 and fmt.encoding == 0 and fmt.channels == 0):
        return PcmFormat(native_rate)
    if fmt.encoding not in (0, S16LE):
        raise InvalidArgument(f"{field}.encoding", "only AUDIO_ENCODING_LINEAR_PCM_S16LE is supported")
    if fmt.channels not in (0, 1):
        raise InvalidArgument(f"{field}.channels", f"only mono (1) is supported, got {fmt.channels}")
    rate = fmt.sample_rate_hz or native_rate
    check_rate(f"{field}.sample_rate_hz", rate)
    return PcmFormat(rate)


def input_format(field: str, fmt: audio_pb2.AudioFormat | None) -> PcmFormat:
    """The format of audio a client sends: rate and encoding are required."""
    if fmt is None or fmt.sample_rate_hz == 0:
        raise InvalidArgument(f"{field}.sample_rate_hz", "is required (8000..48000) for audio you send")
    if fmt.encoding != S16LE:
        raise InvalidArgument(f"{field}.encoding", "must be AUDIO_ENCODING_LINEAR_PCM_S16LE")
    if fmt.channels not in (0, 1):
        raise InvalidArgument(f"{field}.channels", f"only mono (1) is supported, got {fmt.channels}")
    check_rate(f"{field}.sample_rate_hz", fmt.sample_rate_hz)
    return PcmFormat(fmt.sample_rate_hz)


def check_pcm(field: str, pcm: bytes) -> None:
    if len(pcm) % BYTES_PER_SAMPLE:
        raise InvalidArgument(field, f"{len(pcm)} bytes is not a whole number of 16-bit samples")


def to_int16(samples: np.ndarray) -> np.ndarray:
    """Float audio in [-1, 1] (or any int) to int16 with clipping."""
    if samples.dtype == np.int16:
        return samples
    if np.issubdtype(samples.dtype, np.floating):
        return np.clip(np.round(samples * 32767.0), -32768, 32767).astype(np.int16)
    return np.clip(samples, -32768, 32767).astype(np.int16)


def resample(pcm: bytes, src_rate: int, dst_rate: int) -> bytes:
    """Resample a whole s16le buffer (band-limited, soxr HQ)."""
    if src_rate == dst_rate or not pcm:
        return pcm
    x = np.frombuffer(pcm, dtype=np.int16)
    return soxr.resample(x, src_rate, dst_rate, quality="HQ").astype(np.int16).tobytes()


class StreamResampler:
    """Resamples a stream piece by piece with no seams between pieces (one soxr state per stream)."""

    def __init__(self, src_rate: int, dst_rate: int):
        self.src_rate, self.dst_rate = src_rate, dst_rate
        self._stream = None if src_rate == dst_rate else soxr.ResampleStream(src_rate, dst_rate, 1, dtype="int16")

    def feed(self, pcm: bytes, last: bool = False) -> bytes:
        if self._stream is None:
            return pcm
        x = np.frombuffer(pcm, dtype=np.int16)
        return self._stream.resample_chunk(x, last=last).tobytes()


class LiveResampler:
    """Resamples a live input stream (a caller's microphone) with almost nothing held back: a windowed-sinc polyphase
    FIR whose output stops only ``taps`` input samples short of what came in (under 2 ms at 8-48 kHz).

    StreamResampler (soxr) works in blocks: fed 20 ms frames, it held back 21 ms on average (5-38 ms) of 24 or
    48 kHz input resampled to 16 kHz and 63 ms (10-118 ms) of 8 kHz, at any of its qualities (2026-11-29), so the
    recognizer heard a caller's speech end that much later. Replies keep StreamResampler: nothing waits on their
    last samples. A 16-bit signal for a recognizer needs no more than this filter's ~60 dB stop band."""

    TAPS = 32  # per phase: the filter's length in input samples

    def __init__(self, src_rate: int, dst_rate: int):
        self.src_rate, self.dst_rate = src_rate, dst_rate
        g = math.gcd(src_rate, dst_rate)
        self.up, self.down = dst_rate // g, src_rate // g
        if self.up == self.down:
            return
        n = self.TAPS * self.up
        cutoff = 0.9 / max(self.up, self.down)  # of the upsampled band's Nyquist: below both rates' Nyquist
        t = np.arange(n) - (n - 1) / 2
        h = self.up * cutoff * np.sinc(cutoff * t) * np.kaiser(n, 8.0)
        # phase p's taps, newest input first: y = sum_k h[p + k*up] * x[i - k]
        self._phases = h.reshape(self.TAPS, self.up).T.astype(np.float64)
        self._history = np.zeros(self.TAPS - 1, dtype=np.float64)  # the input before this piece
        self._taken = 0  # input samples seen
        self._next = 0  # the next output sample's index

    def feed(self, pcm: bytes) -> bytes:
        if self.up == self.down:
            return pcm
        base = self._taken - len(self._history)  # the input index of x[0]
        x = np.concatenate([self._history, np.frombuffer(pcm, dtype=np.int16).astype(np.float64)])
        self._taken = base + len(x)
        self._history = x[len(x) - len(self._history) :]
        # output j stands at upsampled time u = j*down: input index u//up, phase u%up; it is due once that input came
        last = (self._taken * self.up - 1) // self.down
        j = np.arange(self._next, last + 1)
        self._next = last + 1
        if len(j) == 0:
            return b""
        u = j * self.down
        window = (u // self.up - base)[:, None] - np.arange(self.TAPS)[None, :]  # each output's inputs, newest first
        y = np.einsum("jk,jk->j", x[window], self._phases[u % self.up])
        return np.clip(np.round(y), -32768, 32767).astype(np.int16).tobytes()

    @property
    def delay_seconds(self) -> float:
        """How far the output lags the input: the filter's group delay."""
        return 0.0 if self.up == self.down else (self.TAPS * self.up - 1) / 2 / (self.up * self.src_rate)


def split_pcm(pcm: bytes, max_bytes: int) -> Iterator[bytes]:
    """Cut a buffer into chunks of at most max_bytes (a whole number of samples)."""
    max_bytes -= max_bytes % BYTES_PER_SAMPLE
    for start in range(0, len(pcm), max_bytes):
        yield pcm[start : start + max_bytes]


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(BYTES_PER_SAMPLE)
        w.setframerate(sample_rate)
        w.writeframes(pcm)
    return buf.getvalue()


def write_wav(path, pcm: bytes, sample_rate: int) -> None:
    with open(path, "wb") as f:
        f.write(wav_bytes(pcm, sample_rate))


def read_wav(path_or_bytes) -> tuple[bytes, int]:
    """Read a 16-bit PCM WAV (the plain header or WAVE_FORMAT_EXTENSIBLE's, which phones and many recorders write and
    Python 3.11's ``wave`` refuses); stereo is mixed down to mono. Returns (s16le mono pcm, rate)."""
    if isinstance(path_or_bytes, (bytes, bytearray)):
        data = bytes(path_or_bytes)
    elif hasattr(path_or_bytes, "read"):
        data = path_or_bytes.read()
    else:
        with open(path_or_bytes, "rb") as f:
            data = f.read()
    if _format_tag(data) == WAVE_FORMAT_EXTENSIBLE:
        width, rate, channels, frames = _extensible_pcm(data)
    else:
        with wave.open(io.BytesIO(data), "rb") as w:
            width, rate, channels = w.getsampwidth(), w.getframerate(), w.getnchannels()
            frames = w.readframes(w.getnframes())
    if width != BYTES_PER_SAMPLE:
        raise ValueError(f"only 16-bit PCM WAV is supported, this one has {8 * width}-bit samples")
    if channels > 1:
        x = np.frombuffer(frames, dtype=np.int16).reshape(-1, channels).astype(np.int32).mean(axis=1)
        frames = x.astype(np.int16).tobytes()
    return frames, rate


_PCM_SUBFORMAT = bytes.fromhex("0100000000001000800000aa00389b71")  # KSDATAFORMAT_SUBTYPE_PCM
WAVE_FORMAT_EXTENSIBLE = 0xFFFE


def _chunks(data: bytes):
    """(name, body) of each chunk of a RIFF/WAVE file, in order (nothing when ``data`` is not one)."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return
    at = 12
    while at + 8 <= len(data):
        name, size = data[at : at + 4], int.from_bytes(data[at + 4 : at + 8], "little")
        yield name, data[at + 8 : at + 8 + size]
        at += 8 + size + (size & 1)  # chunks are word-aligned


def _format_tag(data: bytes) -> int | None:
    """The format tag of a RIFF/WAVE file's fmt chunk (None: not one, or no fmt chunk: ``wave`` says why)."""
    fmt = next((body for name, body in _chunks(data) if name == b"fmt "), None)
    return int.from_bytes(fmt[:2], "little") if fmt is not None and len(fmt) >= 2 else None


def _extensible_pcm(data: bytes) -> tuple[int, int, int, bytes]:
    """(sample width, rate, channels, frames) of a RIFF/WAVE file whose fmt chunk is WAVE_FORMAT_EXTENSIBLE with
    the PCM subformat; anything else is refused as ``wave`` refuses it."""
    fmt = frames = None
    for name, body in _chunks(data):
        if name == b"fmt ":
            fmt = body
        elif name == b"data":
            frames = body
    if fmt is None or frames is None or len(fmt) < 40:
        raise wave.Error("WAVE_FORMAT_EXTENSIBLE file without a complete fmt chunk and a data chunk")
    if fmt[24:40] != _PCM_SUBFORMAT:
        raise wave.Error("WAVE_FORMAT_EXTENSIBLE with a subformat other than PCM")
    channels, rate = int.from_bytes(fmt[2:4], "little"), int.from_bytes(fmt[4:8], "little")
    width = int.from_bytes(fmt[14:16], "little") // 8
    usable = len(frames) - len(frames) % max(1, width * channels)
    return width, rate, channels, frames[:usable]


# --- G.711 (ITU-T): 8-bit mu-law and A-law, the phone line's codecs (the OpenAI Realtime route's audio/pcmu, pcma) ---
def _ulaw_table() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent, mantissa = (u >> 4) & 0x07, u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(u & 0x80, -magnitude, magnitude).astype(np.int16)


def _alaw_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    exponent, mantissa = (a >> 4) & 0x07, a & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(a & 0x80, magnitude, -magnitude).astype(np.int16)


_ULAW_TO_PCM = _ulaw_table()
_ALAW_TO_PCM = _alaw_table()
# floor(log2(i)) for i in 0..255 (0 for 0): the segment of a magnitude's top bits.
_SEGMENT = np.array([0] + [int(np.log2(i)) for i in range(1, 256)], dtype=np.int32)


def ulaw_decode(data: bytes) -> bytes:
    """G.711 mu-law bytes to s16le PCM (same rate, one sample per byte)."""
    return _ULAW_TO_PCM[np.frombuffer(data, dtype=np.uint8)].tobytes()


def alaw_decode(data: bytes) -> bytes:
    """G.711 A-law bytes to s16le PCM (same rate, one sample per byte)."""
    return _ALAW_TO_PCM[np.frombuffer(data, dtype=np.uint8)].tobytes()


def ulaw_encode(pcm: bytes) -> bytes:
    """s16le PCM to G.711 mu-law bytes (the 14-bit code: bias 0x21, clip 8159)."""
    v = np.frombuffer(pcm, dtype=np.int16).astype(np.int32) >> 2
    mask = np.where(v < 0, 0x7F, 0xFF)
    v = np.minimum(np.abs(v), 8159) + 0x21
    segment = np.where(v >= 8192, 8, _SEGMENT[(v >> 5) & 0xFF])
    value = np.where(segment >= 8, 0x7F, (segment << 4) | ((v >> (np.minimum(segment, 7) + 1)) & 0x0F))
    return ((value ^ mask) & 0xFF).astype(np.uint8).tobytes()


def alaw_encode(pcm: bytes) -> bytes:
    """s16le PCM to G.711 A-law bytes (13-bit magnitude, even bits inverted)."""
    x = np.frombuffer(pcm, dtype=np.int16).astype(np.int32)
    mask = np.where(x >= 0, 0xD5, 0x55)
    magnitude = np.where(x >= 0, x, -x - 1) >> 3  # 12 bits of magnitude (A-law is a 13-bit code)
    segment = np.where(magnitude < 32, 0, _SEGMENT[(magnitude >> 4) & 0xFF])
    shift = np.maximum(segment, 1)
    value = np.where(segment == 0, magnitude >> 1, (segment << 4) | ((magnitude >> shift) & 0x0F))
    return ((value ^ mask) & 0xFF).astype(np.uint8).tobytes()
