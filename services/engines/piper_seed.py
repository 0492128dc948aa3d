"""Deterministic piper: the VITS graph's noise comes from a seed instead of onnxruntime's hidden generator.

Why: piper's ONNX graph draws its noise with two ``RandomNormalLike`` nodes (the stochastic duration predictor's
``/dp/RandomNormalLike`` and the prior's ``/RandomNormalLike``). onnxruntime builds one generator per node when the
session is created and advances it on every run, so the same text gives different audio on every call, and
``onnxruntime.set_seed`` only fixes where that sequence starts (the second call of a session still differs from the
first). Setting ``noise_scale``/``noise_w`` to 0 would make it repeatable by removing the noise, which changes the
voice (flat prosody), so it is not what we want either.

What: at load, each ``RandomNormalLike(x)`` node is replaced by a lookup into a graph input ``voicefleet_noise``, a
pool of ``POOL_SIZE`` standard normal samples drawn by numpy from the request's seed:

    noise = Reshape(Gather(pool, (Range(0, Size(x)) + offset_k) mod POOL_SIZE), Shape(x)) * scale + mean

Node k reads from offset k * POOL_SIZE / 2, so the two nodes get different noise. Same seed + same text + same
piper/onnxruntime build -> the same PCM, bit for bit, on every call and in every process; another seed -> another
(equally natural) rendition. The noise statistics are what the model was trained with (i.i.d. N(0, 1) from
numpy's PCG64) as long as one node's tensor fits in half the pool (2^19 values: the prior's 192 x frames tensor
fits ~2730 frames, ~32 s of speech in one sentence); a longer sentence re-reads the pool from its start.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

POOL_SIZE = 1 << 20
NOISE_INPUT = "voicefleet_noise"
# The seed used when a request gives none (SynthesisConfig.seed 0): output is reproducible by default.
DEFAULT_SEED = 20240611
_POOLS_KEPT = 8


def seeded_model(model_path: str) -> bytes:
    """The piper ONNX model with its RandomNormalLike nodes fed from the ``voicefleet_noise`` input."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(model_path)
    graph = model.graph
    nodes, replaced = [], 0
    for node in graph.node:
        if node.op_type != "RandomNormalLike":
            nodes.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        p = f"/voicefleet/noise{replaced}"
        offset = replaced * (POOL_SIZE // 2)
        replaced += 1

        def const(name, value, dtype=TensorProto.INT64, p=p):
            return helper.make_node(
                "Constant", [], [p + name], value=helper.make_tensor(p + name + "_value", dtype, [], [value])
            )

        x = node.input[0]
        nodes += [
            const("/zero", 0),
            const("/one", 1),
            const("/offset", offset),
            const("/pool", POOL_SIZE),
            const("/scale", float(attrs.get("scale", 1.0)), TensorProto.FLOAT),
            const("/mean", float(attrs.get("mean", 0.0)), TensorProto.FLOAT),
            helper.make_node("Size", [x], [p + "/size"]),
            helper.make_node("Range", [p + "/zero", p + "/size", p + "/one"], [p + "/range"]),
            helper.make_node("Add", [p + "/range", p + "/offset"], [p + "/shifted"]),
            helper.make_node("Mod", [p + "/shifted", p + "/pool"], [p + "/index"]),
            helper.make_node("Gather", [NOISE_INPUT, p + "/index"], [p + "/flat"], axis=0),
            helper.make_node("Shape", [x], [p + "/shape"]),
            helper.make_node("Reshape", [p + "/flat", p + "/shape"], [p + "/normal"]),
            helper.make_node("Mul", [p + "/normal", p + "/scale"], [p + "/scaled"]),
            helper.make_node("Add", [p + "/scaled", p + "/mean"], [node.output[0]]),
        ]
    if not replaced:
        raise ValueError(f"{model_path} has no RandomNormalLike node; is it a piper VITS model?")
    del graph.node[:]
    graph.node.extend(nodes)
    graph.input.append(helper.make_tensor_value_info(NOISE_INPUT, TensorProto.FLOAT, [POOL_SIZE]))
    # Each phoneme's duration as a second output: piper then gives phoneme alignments (piper_words.py).
    from piper.patch_voice_with_alignment import add_alignment_output

    add_alignment_output(model)
    return model.SerializeToString()


class SeededSession:
    """Stands in for ``PiperVoice.session``: adds the noise pool of the calling thread's seed to each run.

    ``use(seed, run_options)`` sets the seed and the onnxruntime RunOptions for the calling thread (each engine
    step runs in one executor thread), so concurrent streams do not disturb each other; setting
    ``run_options.terminate`` from another thread aborts that step's run between two graph nodes.
    """

    def __init__(self, session):
        self._session = session
        self._local = threading.local()
        self._pools: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def use(self, seed: int, run_options=None) -> None:
        self._local.seed = seed or DEFAULT_SEED
        self._local.run_options = run_options

    def pool(self, seed: int) -> np.ndarray:
        with self._lock:
            pool = self._pools.get(seed)
            if pool is None:
                pool = np.random.default_rng(seed).standard_normal(POOL_SIZE, dtype=np.float32)
                self._pools[seed] = pool
                while len(self._pools) > _POOLS_KEPT:
                    self._pools.popitem(last=False)
            else:
                self._pools.move_to_end(seed)
            return pool

    def run(self, output_names, feed, run_options=None):
        seed = getattr(self._local, "seed", DEFAULT_SEED)
        run_options = run_options or getattr(self._local, "run_options", None)
        return self._session.run(output_names, {**feed, NOISE_INPUT: self.pool(seed)}, run_options)

    def __getattr__(self, name):
        return getattr(self._session, name)
