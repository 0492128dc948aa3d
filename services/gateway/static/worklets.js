// AudioWorklet processors of the page (run on the audio thread): capture, playback with a small jitter buffer, and a
// tap that hands what was played to the page (for tests and the level meter).

// Microphone -> 20 ms frames of s16le at the context's rate, posted to the page (which sends them on the socket).
class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.frame = new Int16Array(Math.round(sampleRate / 50));
    this.filled = 0;
  }
  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    for (let i = 0; i < channel.length; i++) {
      const s = Math.max(-1, Math.min(1, channel[i]));
      this.frame[this.filled++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      if (this.filled === this.frame.length) {
        const out = this.frame.slice().buffer;
        this.port.postMessage(out, [out]);
        this.filled = 0;
      }
    }
    return true;
  }
}

// Reply audio in (s16le chunks as they arrive), played in order. Playback starts once `prebuffer` samples are queued
// (or the stream says it ended), so network jitter does not click; {flush: true} drops everything queued at once
// (barge-in, interrupt). Reports what it dropped and when the queue runs dry.
class PlayerProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.chunks = [];
    this.offset = 0; // read position in chunks[0]
    this.queued = 0;
    this.prebuffer = Math.round(sampleRate * 0.06);
    this.playing = false;
    this.ended = false;
    this.port.onmessage = (e) => {
      const m = e.data;
      if (m instanceof ArrayBuffer) {
        const pcm = new Int16Array(m);
        const f = new Float32Array(pcm.length);
        for (let i = 0; i < pcm.length; i++) f[i] = pcm[i] / 32768;
        this.chunks.push(f);
        this.queued += f.length;
        this.ended = false;
      } else if (m.flush) {
        const dropped = this.queued;
        this.chunks = [];
        this.offset = 0;
        this.queued = 0;
        this.playing = false;
        this.port.postMessage({ flushed: dropped });
      } else if (m.end) {
        this.ended = true;
      }
    };
  }
  process(_inputs, outputs) {
    const out = outputs[0][0];
    if (!this.playing && (this.queued >= this.prebuffer || (this.ended && this.queued > 0))) this.playing = true;
    let i = 0;
    if (this.playing) {
      while (i < out.length && this.chunks.length) {
        const chunk = this.chunks[0];
        const n = Math.min(out.length - i, chunk.length - this.offset);
        out.set(chunk.subarray(this.offset, this.offset + n), i);
        i += n;
        this.offset += n;
        this.queued -= n;
        if (this.offset === chunk.length) {
          this.chunks.shift();
          this.offset = 0;
        }
      }
      if (!this.chunks.length) {
        this.playing = false;
        this.port.postMessage({ drained: true });
      }
    }
    out.fill(0, i);
    return true;
  }
}

// Passes audio through unchanged and posts each 128-sample quantum it passed (what the listener hears).
class TapProcessor extends AudioWorkletProcessor {
  process(inputs, outputs) {
    const input = inputs[0] && inputs[0][0];
    const out = outputs[0][0];
    if (input) out.set(input);
    else out.fill(0);
    const copy = out.slice();
    this.port.postMessage(copy, [copy.buffer]);
    return true;
  }
}

registerProcessor("capture", CaptureProcessor);
registerProcessor("player", PlayerProcessor);
registerProcessor("tap", TapProcessor);
