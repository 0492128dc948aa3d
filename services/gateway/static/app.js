// The page: Talk (microphone -> conversation WebSocket -> reply audio, or the OpenAI Realtime API over WebRTC) and
// Speak (text -> /v1/audio/speech). One AudioContext at 16 kHz for capture and playback; the protocols are in
// docs/gateway.md.
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
// WebRTC mode (OpenAI's browser flow against /v1/realtime/calls): the peer connection, its oai-events channel, and the
// reply track's source in the page's audio graph.
let pc = null;
let events = null;
let remoteSource = null;
let remoteElement = null;

// What the page played, for tests and anyone curious: window.voicefleet.tapStart() / tapTake().
const tapState = { on: false, chunks: [], samples: 0, marks: {}, lastSound: 0 };
const status = { events: [], turns: [], speakDone: 0, drained: 0, flushedSamples: [], mode: "websocket" };

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
    if (e.data.some((x) => Math.abs(x) > 0.03)) tapState.lastSound = tapState.samples;
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

function sendEvent(event) {
  if (events && events.readyState === "open") events.send(JSON.stringify(event));
}

async function startTalking() {
  showError("");
  await audio();
  mic = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
  });
  status.mode = $("talk-transport").value;
  if (status.mode === "webrtc") {
    await startWebRTC();
    return;
  }
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

// --- Talk over WebRTC: OpenAI's browser flow (docs/gateway.md#webrtc-post-v1realtimecalls) ----------------------------
async function startWebRTC() {
  // The STUN/TURN servers the gateway gives clients (gateway.webrtc_client_ice_servers; [] by default): a TURN relay
  // is how a browser reaches a gateway whose own addresses it cannot reach (in a container, behind NAT).
  const ice = await fetch("/v1/realtime/ice_servers", { headers: authHeaders() });
  const iceServers = ice.ok ? (await ice.json()).ice_servers : []; // refused: the call's POST says why
  pc = new RTCPeerConnection({ iceServers });
  pc.ontrack = (e) => {
    const stream = e.streams[0] || new MediaStream([e.track]);
    // Chrome hands a remote track to Web Audio only while a media element holds it too; the element is muted and
    // the reply plays through the page's audio graph (where the tap hears it).
    remoteElement = new Audio();
    remoteElement.muted = true;
    remoteElement.srcObject = stream;
    remoteElement.play().catch(() => {});
    remoteSource = ctx.createMediaStreamSource(stream);
    remoteSource.connect(tap);
  };
  for (const track of mic.getAudioTracks()) pc.addTrack(track, mic);
  events = pc.createDataChannel("oai-events");
  events.onopen = () => {
    const session = {
      type: "realtime",
      instructions: $("system").value,
      audio: { input: { transcription: { model: "whisper-1", language: "en" } }, output: {} },
    };
    if ($("talk-voice").value) session.audio.output.voice = $("talk-voice").value;
    events.send(JSON.stringify({ type: "session.update", session }));
    $("state").textContent = "listening";
  };
  events.onmessage = (e) => onRealtimeEvent(JSON.parse(e.data));
  events.onclose = () => {
    if (pc) stopTalking();
  };
  pc.onconnectionstatechange = () => {
    if (pc && pc.connectionState === "failed") {
      showError("WebRTC connection failed");
      stopTalking();
    }
  };
  await pc.setLocalDescription(await pc.createOffer());
  const r = await fetch("/v1/realtime/calls", {
    method: "POST",
    body: pc.localDescription.sdp,
    headers: { "Content-Type": "application/sdp", ...authHeaders() },
  });
  if (r.status !== 201) {
    const error = await r.json().catch(() => ({ error: { message: r.statusText } }));
    stopTalking();
    showError(`call refused: ${r.status} ${error.error.message}`);
    return;
  }
  status.call = r.headers.get("Location");
  await pc.setRemoteDescription({ type: "answer", sdp: await r.text() });
  setTalking(true);
}

let lastUserText = "";

function onRealtimeEvent(m) {
  status.events.push(m);
  switch (m.type) {
    case "input_audio_buffer.speech_started":
      $("state").textContent = "listening (speech)";
      break;
    case "response.created":
      $("state").textContent = "thinking";
      $("reply-text").textContent = "";
      break;
    case "conversation.item.input_audio_transcription.completed":
      lastUserText = m.transcript;
      $("user-text").textContent = m.transcript;
      break;
    case "response.output_audio_transcript.delta":
    case "response.output_text.delta":
      $("reply-text").textContent += m.delta;
      break;
    case "output_audio_buffer.started":
      if (tapState.marks.replyStarted === undefined) tapState.marks.replyStarted = tapState.samples;
      $("state").textContent = "speaking";
      break;
    case "output_audio_buffer.stopped":
      status.drained += 1;
      $("state").textContent = "listening";
      break;
    case "output_audio_buffer.cleared":
      tapState.marks.flush = tapState.samples;
      $("state").textContent = "interrupted";
      break;
    case "response.done": {
      const r = m.response;
      const part = r.output[0] && r.output[0].content[0];
      const said = part ? part.transcript || part.text || "" : "";
      status.turns.push({ status: r.status, user_text: lastUserText, reply_text: said, response_id: r.id });
      const row = document.createElement("tr");
      const cells = [status.turns.length, lastUserText, said + (r.status === "cancelled" ? " (interrupted)" : ""), "", "", r.status];
      for (const c of cells) {
        const td = document.createElement("td");
        td.textContent = c;
        row.appendChild(td);
      }
      $("turns").appendChild(row);
      break;
    }
    case "error":
      showError(`realtime: ${m.error.code}: ${m.error.message}`);
      break;
  }
}

function stopTalking() {
  if (socket && socket.readyState <= WebSocket.OPEN) socket.close(1000, "hang up");
  socket = null;
  if (events) events.close();
  events = null;
  if (pc) pc.close();
  pc = null;
  if (remoteSource) remoteSource.disconnect();
  remoteSource = null;
  if (remoteElement) remoteElement.srcObject = null;
  remoteElement = null;
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
  // WebRTC: a disabled track sends silence.
  if (pc && mic) for (const track of mic.getAudioTracks()) track.enabled = !muted;
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
    tapState.lastSound = 0;
  },
  // Seconds of silence at the end of what was tapped (what is still arriving plays within them).
  tapQuiet: () => (tapState.samples - tapState.lastSound) / (ctx ? ctx.sampleRate : RATE),
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
  sendEvent({ type: "response.cancel" });
  sendEvent({ type: "output_audio_buffer.clear" });
};
$("talk-end-turn").onclick = () => {
  send({ type: "end_of_turn" });
  sendEvent({ type: "input_audio_buffer.commit" });
};
$("speak-play").onclick = () => speak().catch((e) => showError(`speak: ${e}`));
loadVoices();
