// Integration test of `prefix-router engine` with the official OpenAI Node.js SDK (pinned in
// package.json): what a real client sees, beyond our own HTTP tests. It spawns the engine on an
// ephemeral loopback port (tiny-test profile, time scale 0.001: modelled time is negligible),
// reads the port from its start-up log line, drives it through `new OpenAI({baseURL})`, and
// kills it at the end.
//
// Usage: node --test                (binary from $PREFIX_ROUTER_BIN, or build/release, or build/test)
//        PREFIX_ROUTER_BIN=path/to/prefix-router node --test
// Every wait is bounded: the engine must log its address within 10 s, each SDK call times out
// after 10 s without retries, and the whole file has a 60 s budget.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');

function engineBinary() {
  if (process.env.PREFIX_ROUTER_BIN) return resolve(process.env.PREFIX_ROUTER_BIN);
  for (const tree of ['build/release', 'build/test']) {
    const p = resolve(root, tree, 'src/prefix-router');
    if (existsSync(p)) return p;
  }
  throw new Error('prefix-router not found: set PREFIX_ROUTER_BIN or run scripts/build.sh release');
}

let engine;         // the child process
let log = '';       // its stdout and stderr, for failure messages
let client;         // OpenAI client bound to the engine

// Starts the engine and resolves with its port, read from the log line
// "engine emulator on 127.0.0.1:PORT: ...".
function startEngine(bin) {
  return new Promise((resolvePort, reject) => {
    engine = spawn(bin, ['engine', '--listen', '127.0.0.1:0', '--profile', 'tiny-test',
                         '--time-scale', '0.001', '--adapter', 'sql-lora',
                         '--enable-prompt-tokens-details'],
                   { stdio: ['ignore', 'pipe', 'pipe'] });
    const timer = setTimeout(() => reject(new Error(`engine did not log its address within 10 s:\n${log}`)),
                             10_000);
    const onData = (chunk) => {
      log += chunk.toString();
      const m = log.match(/engine emulator on 127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolvePort(Number(m[1]));
      }
    };
    engine.stdout.on('data', onData);
    engine.stderr.on('data', onData);
    engine.on('error', (e) => { clearTimeout(timer); reject(e); });
    engine.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`engine exited (code ${code}, signal ${signal}) before listening:\n${log}`));
    });
  });
}

before(async () => {
  const port = await startEngine(engineBinary());
  client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'x', maxRetries: 0, timeout: 10_000 });
});

after(async () => {
  if (!engine || engine.exitCode !== null || engine.signalCode !== null) return;
  const exited = new Promise((r) => engine.once('exit', r));
  engine.kill('SIGTERM');
  const timer = setTimeout(() => engine.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
});

const messages = [
  { role: 'system', content: 'You are a terse assistant for the accounting team.' },
  { role: 'user', content: 'Summarise the quarterly report in one sentence.' },
];

// A non-streaming chat completion parses into the SDK's types: a non-empty string reply of
// max_tokens tokens, and usage with prompt_tokens_details.cached_tokens (the engine runs with
// --enable-prompt-tokens-details; like vLLM it sends null while nothing is cached).
test('chat.completions.create (non-streaming)', { timeout: 20_000 }, async () => {
  const r = await client.chat.completions.create({ model: 'llama', messages, max_tokens: 8 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, 'llama');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.choices[0].message.content.split(' ').length, 8);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
  assert.equal(r.usage.prompt_tokens_details, null, JSON.stringify(r.usage));

  // The same request again: the same reply, with its prompt's full blocks now cached.
  const again = await client.chat.completions.create({ model: 'llama', messages, max_tokens: 8 });
  assert.equal(again.choices[0].message.content, r.choices[0].message.content);
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(again.usage));
});

// A streamed chat completion with stream_options.include_usage: the SDK's iterator yields
// chunks whose content deltas concatenate to the non-streamed reply, and a final usage chunk.
test('chat.completions.create (streaming, include_usage)', { timeout: 20_000 }, async () => {
  const stream = await client.chat.completions.create({
    model: 'llama', messages, max_tokens: 6, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let deltas = 0;
  let role;
  let finish;
  let usage;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.role) role = choice.delta.role;
      if (typeof choice.delta.content === 'string') {
        text += choice.delta.content;
        deltas += 1;
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(deltas, 6);
  assert.ok(text.length > 0);
  assert.equal(finish, 'length');
  assert.ok(usage, 'no usage chunk');
  assert.equal(usage.completion_tokens, 6);
  assert.ok(usage.prompt_tokens > 0);
  assert.equal(typeof usage.prompt_tokens_details.cached_tokens, 'number');
  const whole = await client.chat.completions.create({ model: 'llama', messages, max_tokens: 6 });
  assert.equal(text, whole.choices[0].message.content);
});

// The legacy completions API, plain and streamed.
test('completions.create', { timeout: 20_000 }, async () => {
  const r = await client.completions.create({ model: 'llama', prompt: 'Once upon a time', max_tokens: 5 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.choices[0].text.split(' ').length, 5);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 5);

  const stream = await client.completions.create({ model: 'llama', prompt: 'Once upon a time', max_tokens: 5,
                                                   stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
});

// models.list pages through the served base model and its adapter.
test('models.list', { timeout: 20_000 }, async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, ['llama', 'sql-lora']);
});

// A served adapter answers under its name.
test('a served LoRA adapter', { timeout: 20_000 }, async () => {
  const r = await client.chat.completions.create({ model: 'sql-lora', messages, max_tokens: 3 });
  assert.equal(r.model, 'sql-lora');
  assert.equal(r.usage.completion_tokens, 3);
});

// An unknown model is vLLM's 404, which the SDK surfaces as its NotFoundError with vLLM's message.
test('unknown model is NotFoundError', { timeout: 20_000 }, async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 3 }),
    (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, `expected NotFoundError, got ${e?.constructor?.name}: ${e}`);
      assert.equal(e.status, 404);
      assert.match(e.message, /does not exist/);
      return true;
    });
  await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 }),
                       OpenAI.NotFoundError);
});
