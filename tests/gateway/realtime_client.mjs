// One spoken turn on the gateway's /v1/realtime with the official `openai` npm package's WebSocket client
// (OpenAIRealtimeWS from 'openai/realtime/ws', on the `ws` package): a second, independent Realtime client beside the
// Python SDK. Run by tests/gateway/test_realtime_node.py, which judges what it writes.
//
//   node realtime_client.mjs <base_url> <api_key> <question.pcm> <reply.pcm>
//
// base_url: http://HOST:PORT/v1 (the SDK makes ws://HOST:PORT/v1/realtime?model=... of it); api_key: a bearer token
// or a client secret (ek_...); question.pcm: s16le mono 24 kHz (audio/pcm), streamed at real time in 100 ms appends,
// then silence like an open microphone until response.done. Writes the reply audio (s16le 24 kHz) to reply.pcm and one
// JSON line to stdout: the session.created session, the event types in order, the user's transcript, the reply's
// transcript, the response's status and any error events. Exits 1 on an error or when nothing ends the turn in time.
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';

const [baseURL, apiKey, questionPath, replyPath] = process.argv.slice(2);
if (!replyPath) {
  console.error('usage: node realtime_client.mjs <base_url> <api_key> <question.pcm> <reply.pcm>');
  process.exit(2);
}
const CHUNK_MS = 100;
const BYTES_PER_MS = 48; // s16le at 24 kHz
const TURN_TIMEOUT_MS = 180_000; // a CPU fleet answering on 2 busy cores; never a timing assert, only a way out

const question = readFileSync(questionPath);
const client = new OpenAI({ apiKey, baseURL });
// The SDK always opens wss:// (openai-node's buildRealtimeURL sets the protocol whatever the base URL says). For a
// gateway served over plain HTTP (the test fleet on loopback) the socket's transport is a plain TCP connection, given
// through the SDK's `options` to ws (its createConnection option): only TLS is left out, every byte of the WebSocket
// and of the protocol is the SDK's own. A gateway with TLS (security.tls_cert) takes an https:// base URL as it is.
const plain = new URL(baseURL).protocol === 'http:';
const options = plain ? { createConnection: (o) => net.connect({ host: o.host, port: Number(o.port) }) } : undefined;
const rt = await OpenAIRealtimeWS.create(client, { model: 'gpt-realtime', options });

const result = { session: null, events: [], user_transcript: null, reply_transcript: null, status: null, errors: [] };
const reply = [];
let microphone = null;

function finish(code) {
  clearInterval(microphone);
  writeFileSync(replyPath, Buffer.concat(reply));
  console.log(JSON.stringify(result));
  rt.close();
  process.exit(code);
}

const timer = setTimeout(() => {
  result.errors.push({ message: `no response.done within ${TURN_TIMEOUT_MS} ms` });
  finish(1);
}, TURN_TIMEOUT_MS);

rt.on('error', (err) => {
  result.errors.push({ message: err.message, error: err.error ?? null });
  clearTimeout(timer);
  finish(1);
});
rt.on('event', (event) => result.events.push(event.type));
rt.on('conversation.item.input_audio_transcription.completed', (event) => {
  result.user_transcript = event.transcript;
});
rt.on('response.output_audio.delta', (event) => reply.push(Buffer.from(event.delta, 'base64')));
rt.on('response.output_audio_transcript.done', (event) => {
  result.reply_transcript = event.transcript;
});
rt.on('response.done', (event) => {
  result.status = event.response.status;
  clearTimeout(timer);
  finish(0);
});

rt.on('session.created', (event) => {
  result.session = event.session;
  // A microphone: the question at real time, then silence until the turn ends.
  const step = CHUNK_MS * BYTES_PER_MS;
  let offset = 0;
  microphone = setInterval(() => {
    const chunk = offset < question.length ? question.subarray(offset, offset + step) : Buffer.alloc(step);
    offset += step;
    rt.send({ type: 'input_audio_buffer.append', audio: chunk.toString('base64') });
  }, CHUNK_MS);
});
