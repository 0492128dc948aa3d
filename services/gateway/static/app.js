// The page: Talk (microphone -> conversation WebSocket -> reply audio) and Speak (text -> /v1/audio/speech).
// One AudioContext at 16 kHz for capture and playback; the WebSocket protocol is in docs/gateway.md.
"use strict";

const $ = (id) => document.getElementById(id);
const RATE = 16000;
let ctx = null;
let player = null;
let tap = null;
let socket = null;
let mic = null;
let capture = null;
let muted = false;

// What the page played, for tests and anyone curious: window.voicefleet.tapStart() / tapTake().
const tapState = { on: false, chunks: [], samples: 0, marks: {} };
const status = { events: [], turns: [], speakDone: 0, drained: 0, flushedSamples: [] };

function showError(text) {
  $("error").textContent = text;
}

async function audio() {
  if (ctx) {
    await ctx.resume();
    return;
  }
  ctx = new AudioContext({ sampleRate: RATE, latencyHint: "interactive" });
  await ctx.audioWorklet.addModule("/static/worklets.js");
  player = new AudioWorkletNode(ctx, "player", { outputChannelCount: [1] });
  tap = new AudioWorkletNode(ctx, "tap", { outputChannelCount: [1] });
  player.connect(tap).connect(ctx.destination);
  player.port.onmessage = (e) => {
    if (e.data.flushed !== undefined) status.flushedSamples.push(e.data.flushed);
    if (e.data.drained) status.drained += 1;
  };
  tap.port.onmessage = (e) => {
    if (!tapState.on) return;
    tapState.chunks.push(e.data);
    tapState.samples += e.data.length;
  };
  await ctx.resume();
}

function token() {
  return $("token").value.trim();
}

function authHeaders() {
  return token() ? { Authorization: `Bearer ${token()}` } : {};
}

function play(buffer) {
  player.port.postMessage(buffer, [buffer]);
}

function flushPlayback() {
  tapState.marks.flush = tapState.samples;
  player.port.postMessage({ flush: true });
}

// --- voices -----------------------------------------------------------------------------------------------------
async function loadVoices() {
  try {
    const r = await fetch("/v1/audio/voices", { headers: authHeaders() });
    if (!r.ok) return;
    const body = await r.json();
    for (const select of [$("talk-voice"), $("speak-voice")]) {
      for (const v of body.data) {
        const option = document.createElement("option");
        option.value = v.id;
        option.textContent = `${v.name} (${v.service})`;
        select.appendChild(option);
      }
    }
  } catch (e) {
    showError(`voices: ${e}`);
  }
}

// --- Talk -------------------------------------------------------------------------------------------------------
function setTalking(on) {
  $("talk-start").disabled = on;
  for (const id of ["talk-mute", "talk-interrupt", "talk-end-turn", "talk-stop"]) $(id).disabled = !on;
}

function send(message) {
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
}

async function startTalking() {
  showError("");
  await audio();
  mic = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
  });
  const source = ctx.createMediaStreamSource(mic);
  capture = new AudioWorkletNode(ctx, "capture", { numberOfOutputs: 1, outputChannelCount: [1] });
  const silent = ctx.createGain();
  silent.gain.value = 0; // pulls the capture node without playing the microphone back
  source.connect(capture).connect(silent).connect(ctx.destination);
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const query = token() ? `?access_token=${encodeURIComponent(token())}` : "";
  socket = new WebSocket(`${scheme}://${location.host}/v1/conversation${query}`);
  socket.binaryType = "arraybuffer";
  socket.onopen = () => {
    const config = {
      type: "config",
      sample_rate: ctx.sampleRate,
      output_sample_rate: ctx.sampleRate,
      language: "en-US",
      system_prompt: $("system").value,
      // The browser says it cancels the reply's echo in the microphone: the server then leaves the audio alone.
      client_cancels_echo: mic.getAudioTracks()[0]?.getSettings().echoCancellation === true,
    };
    if ($("talk-voice").value) config.voice = $("talk-voice").value;
    socket.send(JSON.stringify(config));
  };
  socket.onmessage = (e) => {
    if (e.data instanceof ArrayBuffer) {
      if (tapState.marks.flush !== undefined && tapState.marks.audioAfterFlush === undefined) {
        tapState.marks.audioAfterFlush = tapState.samples;
      }
      play(e.data);
      return;
    }
    onEvent(JSON.parse(e.data));
  };
  socket.onclose = (e) => {
    status.closed = { code: e.code, reason: e.reason };
    if (e.code !== 1000) showError(`conversation closed: ${e.code} ${e.reason}`);
    stopTalking();
  };
  setTalking(true);
}

function onEvent(m) {
  status.events.push(m);
  switch (m.type) {
    case "ready":
      capture.port.onmessage = (e) => {
        if (socket && socket.readyState === WebSocket.OPEN) socket.send(e.data);
      };
      $("state").textContent = "listening";
      break;
    case "state":
      $("state").textContent = m.state;
      if (m.state === "thinking") $("reply-text").textContent = "";
      break;
    case "transcript":
      if (m.final) {
        $("user-text").textContent = m.text;
        $("interim").textContent = "";
      } else {
        $("interim").textContent = m.text;
      }
      break;
    case "reply_text":
      $("reply-text").textContent += m.delta;
      break;
    case "interrupted":
      flushPlayback(); // at once: what is queued would play over the user
      $("state").textContent = `interrupted (${m.reason})`;
      $("reply-text").textContent = `${m.heard_text} (interrupted)`;
      break;
    case "turn_complete": {
      status.turns.push(m);
      const row = document.createElement("tr");
      const cells = [
        m.turn,
        m.user_text,
        m.reply_text + (m.interrupted ? " (interrupted)" : ""),
        `${m.timings.speech_end_to_first_audio_ms} ms`,
        `${m.timings.speech_end_to_transcript_ms} ms`,
        m.served_by,
      ];
      for (const c of cells) {
        const td = document.createElement("td");
        td.textContent = c;
        row.appendChild(td);
      }
      $("turns").appendChild(row);
      break;
    }
    case "turn_error":
    case "error":
      showError(`${m.type === "error" ? "conversation" : "turn"} failed: ${m.code}: ${m.message}`);
      break;
  }
}

function stopTalking() {
  if (socket && socket.readyState <= WebSocket.OPEN) socket.close(1000, "hang up");
  socket = null;
  if (mic) mic.getTracks().forEach((t) => t.stop());
  mic = null;
  if (capture) capture.disconnect();
  capture = null;
  muted = false;
  $("talk-mute").textContent = "Mute";
  $("talk-mute").setAttribute("aria-pressed", "false");
  $("state").textContent = "idle";
  setTalking(false);
}

function toggleMute() {
  muted = !muted;
  send({ type: muted ? "mute" : "unmute" });
  $("talk-mute").textContent = muted ? "Unmute" : "Mute";
  $("talk-mute").setAttribute("aria-pressed", String(muted));
}

// --- Speak ------------------------------------------------------------------------------------------------------
async function speak() {
  showError("");
  await audio();
  const body = {
    model: "voicefleet",
    input: $("speak-text").value,
    response_format: "pcm",
    sample_rate: ctx.sampleRate,
    speed: Number($("speak-speed").value) || 1,
  };
  if ($("speak-voice").value) body.voice = $("speak-voice").value;
  $("speak-status").textContent = "speaking ...";
  const started = performance.now();
  const r = await fetch("/v1/audio/speech", {
    method: "POST",
    headers: { "Content-Type": "application/json", ...authHeaders() },
    body: JSON.stringify(body),
  });
  if (!r.ok) {
    const error = await r.json().catch(() => ({ error: { message: r.statusText } }));
    $("speak-status").textContent = "";
    showError(`speak failed: ${r.status} ${error.error.message}`);
    return;
  }
  const reader = r.body.getReader();
  let carry = null; // a byte of a sample split across two network chunks
  let first = true;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    let bytes = value;
    if (carry !== null) {
      bytes = new Uint8Array(value.length + 1);
      bytes[0] = carry;
      bytes.set(value, 1);
      carry = null;
    }
    if (bytes.length % 2) {
      carry = bytes[bytes.length - 1];
      bytes = bytes.subarray(0, bytes.length - 1);
    }
    if (first && bytes.length) {
      $("speak-status").textContent = `first audio after ${Math.round(performance.now() - started)} ms`;
      first = false;
    }
    play(bytes.slice().buffer);
  }
  player.port.postMessage({ end: true });
  status.speakDone += 1;
}

// --- test hooks -------------------------------------------------------------------------------------------------
function base64(int16) {
  const bytes = new Uint8Array(int16.buffer);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

window.voicefleet = {
  status,
  rate: () => (ctx ? ctx.sampleRate : RATE),
  tapStart() {
    tapState.on = true;
    tapState.chunks = [];
    tapState.samples = 0;
    tapState.marks = {};
  },
  // Everything tapped since tapStart as base64 s16le, and the sample indexes of marks (flush, audioAfterFlush).
  tapTake() {
    const all = new Int16Array(tapState.samples);
    let at = 0;
    for (const c of tapState.chunks) {
      for (let i = 0; i < c.length; i++) all[at + i] = Math.max(-32768, Math.min(32767, Math.round(c[i] * 32767)));
      at += c.length;
    }
    return { pcm: base64(all), rate: ctx.sampleRate, marks: { ...tapState.marks } };
  },
};

$("talk-start").onclick = () => startTalking().catch((e) => showError(`microphone: ${e}`));
$("talk-stop").onclick = stopTalking;
$("talk-mute").onclick = toggleMute;
$("talk-interrupt").onclick = () => {
  send({ type: "interrupt" });
  flushPlayback();
};
$("talk-end-turn").onclick = () => send({ type: "end_of_turn" });
$("speak-play").onclick = () => speak().catch((e) => showError(`speak: ${e}`));
loadVoices();
