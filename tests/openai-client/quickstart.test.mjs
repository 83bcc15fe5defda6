// The README's quick start, run as written, through the official OpenAI Node.js SDK (pinned in
// package.json). It reads the fenced sh block under "## Running the gateway" in README.md, takes
// its `prefix-router serve` command (backslash-continued lines joined; the build line and
// comments ignored), runs it with the binary under test in place of the README's path and every
// 127.0.0.1:PORT replaced by a free loopback port (each distinct README port by its own), with an
// emulated engine (`prefix-router engine`, tiny-test profile, time scale 0.001) on each
// --instance port. Then: models.list() is the engines' models; a chat completion and a streamed
// one succeed through the gateway; requests spread over every instance the block names; and an
// unknown model is the gateway's own 404 `model_not_found`, not an engine's.
//
// Usage: node --test quickstart.test.mjs   (binary from $PREFIX_ROUTER_BIN, or build/release,
//                                           or build/test), or tests/openai-client/run.sh [BIN]
// Every wait is bounded: each child must log its address within 10 s, each SDK call times out
// after 10 s without retries, each test after 20 s. Every child is killed in after(), and with
// SIGKILL on any exit of this process.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const readmePath = resolve(root, 'README.md');
const HEADING = '## Running the gateway';

function prefixRouterBinary() {
  if (process.env.PREFIX_ROUTER_BIN) return resolve(process.env.PREFIX_ROUTER_BIN);
  for (const tree of ['build/release', 'build/test']) {
    const p = resolve(root, tree, 'src/prefix-router');
    if (existsSync(p)) return p;
  }
  throw new Error('prefix-router not found: set PREFIX_ROUTER_BIN or run scripts/build.sh release');
}

// The quick start's `prefix-router serve` command from the README, as argv (no shell).
function readmeServeCommand(markdown) {
  const lines = markdown.split('\n');
  const start = lines.findIndex((l) => l.trimEnd() === HEADING);
  if (start < 0) throw new Error(`README.md has no heading "${HEADING}"`);
  // The section ends at the next heading of level 1 or 2 outside a fenced block.
  let end = lines.length;
  for (let i = start + 1, fenced = false; i < lines.length; i += 1) {
    if (/^```/.test(lines[i])) fenced = !fenced;
    else if (!fenced && /^#{1,2} /.test(lines[i])) { end = i; break; }
  }
  const open = lines.findIndex((l, i) => i > start && i < end && /^```(sh|bash|shell)\s*$/.test(l));
  if (open < 0) throw new Error(`README.md: no fenced sh block under "${HEADING}"`);
  const close = lines.findIndex((l, i) => i > open && /^```\s*$/.test(l));
  if (close < 0 || close > end) throw new Error(`README.md: the sh block under "${HEADING}" is not closed`);

  // Shell lines: comments dropped, backslash-continued lines joined.
  const commands = [];
  let current = '';
  for (const raw of lines.slice(open + 1, close)) {
    if (!current && (raw.trim() === '' || raw.trim().startsWith('#'))) continue;
    if (/\\\s*$/.test(raw)) {
      current += raw.replace(/\\\s*$/, ' ');
    } else {
      commands.push((current + raw).trim());
      current = '';
    }
  }
  if (current) throw new Error(`README.md: the sh block under "${HEADING}" ends with a continuation`);
  const serve = commands.filter((c) => /(^|\/)prefix-router\s+serve(\s|$)/.test(c));
  if (serve.length !== 1) {
    throw new Error(`README.md: expected one \`prefix-router serve\` command in the sh block under ` +
                    `"${HEADING}", found ${serve.length}:\n${commands.join('\n')}`);
  }
  const others = commands.filter((c) => c !== serve[0] && !/^bash scripts\/build\.sh\b/.test(c));
  if (others.length) throw new Error(`README.md: unexpected commands in the quick start block:\n${others.join('\n')}`);
  const meta = serve[0].match(/['"`$;&|<>(){}*?\\!#~]/);
  if (meta) {
    throw new Error(`README.md: the serve command has the shell character ${meta[0]}, which this test ` +
                    `does not interpret (it splits on whitespace): ${serve[0]}`);
  }
  const argv = serve[0].split(/\s+/);
  if (!/(^|\/)prefix-router$/.test(argv[0]) || argv[1] !== 'serve') {
    throw new Error(`README.md: the serve command does not start with prefix-router serve: ${serve[0]}`);
  }
  return argv;
}

// Values of a flag given as `--flag VALUE` or `--flag=VALUE`.
function flagValues(argv, flag) {
  const values = [];
  argv.forEach((a, i) => {
    if (a === flag && i + 1 < argv.length) values.push(argv[i + 1]);
    else if (a.startsWith(`${flag}=`)) values.push(a.slice(flag.length + 1));
  });
  return values;
}

// A free loopback port: bound to 0 and released (the gateway binds it just after).
function freePort() {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolvePort(port));
    });
  });
}

const children = [];   // { name, proc, log }
process.on('exit', () => {
  for (const c of children) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
});

// Spawns a child and resolves with the first match of `pattern` in its output (stdout and
// stderr), rejecting if it exits first or after 10 s.
function spawnUntil(name, bin, args, pattern) {
  const child = { name, proc: spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] }), log: '' };
  children.push(child);
  return new Promise((resolveMatch, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${name} did not log ${pattern} within 10 s:\n${args.join(' ')}\n${child.log}`)), 10_000);
    const onData = (chunk) => {
      child.log += chunk.toString();
      const m = child.log.match(pattern);
      if (m) {
        clearTimeout(timer);
        resolveMatch(m);
      }
    };
    child.proc.stdout.on('data', onData);
    child.proc.stderr.on('data', onData);
    child.proc.on('error', (e) => { clearTimeout(timer); reject(e); });
    child.proc.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (code ${code}, signal ${signal}) before it was ready:\n` +
                       `${args.join(' ')}\n${child.log}`));
    });
  });
}

function logs() {
  return children.map((c) => `--- ${c.name}\n${c.log}`).join('\n');
}

let client;         // OpenAI client bound to the gateway
let gatewayUrl;     // http://127.0.0.1:PORT
let engines = [];   // { address: '127.0.0.1:PORT', models: [ids] }, in README order
let argv;           // the command as run

before(async () => {
  const bin = prefixRouterBinary();
  argv = readmeServeCommand(readFileSync(readmePath, 'utf8'));
  argv[0] = bin;

  const listen = flagValues(argv, '--listen');
  const instances = flagValues(argv, '--instance');
  if (listen.length !== 1 || !/^127\.0\.0\.1:\d+$/.test(listen[0])) {
    throw new Error(`README quick start: expected one --listen 127.0.0.1:PORT, got ${JSON.stringify(listen)}`);
  }
  if (instances.length === 0 || instances.some((u) => !/^http:\/\/127\.0\.0\.1:\d+\/?$/.test(u))) {
    throw new Error(`README quick start: expected --instance http://127.0.0.1:PORT, got ${JSON.stringify(instances)}`);
  }
  const listenPort = listen[0].split(':')[1];
  const instancePorts = [...new Set(instances.map((u) => u.match(/:(\d+)\/?$/)[1]))];
  if (instancePorts.includes(listenPort)) throw new Error(`README quick start: port ${listenPort} is both --listen and --instance`);

  // Each distinct README port gets its own free port: an engine's is the one it binds to from
  // port 0 (read from its log); the gateway's and any other is picked here.
  const ports = new Map();
  for (const p of instancePorts) {
    const m = await spawnUntil(`engine for README port ${p}`, bin,
                               ['engine', '--listen', '127.0.0.1:0', '--profile', 'tiny-test', '--time-scale', '0.001'],
                               /engine emulator on 127\.0\.0\.1:(\d+)/);
    ports.set(p, m[1]);
  }
  for (const arg of argv) {
    for (const [, p] of arg.matchAll(/127\.0\.0\.1:(\d+)/g)) if (!ports.has(p)) ports.set(p, String(await freePort()));
  }
  argv = argv.map((a) => a.replace(/127\.0\.0\.1:(\d+)/g, (_, p) => `127.0.0.1:${ports.get(p)}`));

  for (const p of instancePorts) {
    const address = `127.0.0.1:${ports.get(p)}`;
    const r = await fetch(`http://${address}/v1/models`, { signal: AbortSignal.timeout(10_000) });
    assert.equal(r.status, 200, `engine ${address} GET /v1/models`);
    engines.push({ address, models: (await r.json()).data.map((m) => m.id) });
  }

  const gatewayPort = ports.get(listenPort);
  await spawnUntil('gateway', argv[0], argv.slice(1),
                   new RegExp(`listening on 127\\.0\\.0\\.1:${gatewayPort}\\b`));
  gatewayUrl = `http://127.0.0.1:${gatewayPort}`;
  client = new OpenAI({ baseURL: `${gatewayUrl}/v1`, apiKey: 'x', maxRetries: 0, timeout: 10_000 });
});

after(async () => {
  await Promise.all(children.map(async ({ proc }) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  }));
});

const messages = [
  { role: 'system', content: 'You are a terse assistant for the accounting team.' },
  { role: 'user', content: 'Summarise the quarterly report in one sentence.' },
];

// GET /v1/models through the SDK: the union of the engines' models, each listing every instance
// of the README's block (the gateway's `instances` field; docs/discovery.md).
test('README quick start: models.list()', { timeout: 20_000 }, async (t) => {
  t.diagnostic(`ran: ${argv.join(' ')}`);
  const expected = [...new Set(engines.flatMap((e) => e.models))].sort();
  assert.ok(expected.length > 0, 'the engines serve no model');
  const listed = [];
  for await (const m of client.models.list()) listed.push(m);
  assert.deepEqual(listed.map((m) => m.id).sort(), expected, `${argv.join(' ')}\n${logs()}`);
  for (const m of listed) {
    assert.equal(m.object, 'model');
    assert.deepEqual([...m.instances].sort(), engines.filter((e) => e.models.includes(m.id)).map((e) => e.address).sort(),
                     JSON.stringify(m));
  }
});

// A chat completion through the gateway, answered by one of the engines.
test('README quick start: chat.completions.create', { timeout: 20_000 }, async () => {
  const model = engines[0].models[0];
  const { data: r, response } = await client.chat.completions.create({ model, messages, max_tokens: 8 }).withResponse();
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, model);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
  assert.ok(engines.some((e) => e.address === response.headers.get('x-prefix-router-instance')),
            `x-prefix-router-instance: ${response.headers.get('x-prefix-router-instance')}`);
});

// A streamed chat completion through the gateway: the deltas make the non-streamed reply.
test('README quick start: chat.completions.create (streaming)', { timeout: 20_000 }, async () => {
  const model = engines[0].models[0];
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 6, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish;
  let usage;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (typeof choice.delta.content === 'string') text += choice.delta.content;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.ok(text.length > 0);
  assert.equal(finish, 'length');
  assert.equal(usage?.completion_tokens, 6, JSON.stringify(usage));
  const whole = await client.chat.completions.create({ model, messages, max_tokens: 6 });
  assert.equal(text, whole.choices[0].message.content);
});

// Every instance of the block serves: 24 prompts with distinct prefixes are placed by their
// prefix hash, so each instance gets some (all on one of two: probability 2^-23). A dead
// instance would be ejected after its first connect failure and get none.
test('README quick start: every instance serves', { timeout: 20_000 }, async () => {
  const model = engines[0].models[0];
  const served = new Map();
  for (let i = 0; i < 24; i += 1) {
    const { response } = await client.chat.completions.create({
      model, max_tokens: 1, messages: [{ role: 'user', content: `Question ${i}: what is ${i} squared?` }],
    }).withResponse();
    const instance = response.headers.get('x-prefix-router-instance');
    served.set(instance, (served.get(instance) ?? 0) + 1);
  }
  assert.deepEqual([...served.keys()].sort(), engines.map((e) => e.address).sort(),
                   `requests by instance: ${JSON.stringify([...served])}\n${logs()}`);
});

// An unknown model is answered by the gateway itself (discovery knows no instance serves it):
// 404 with OpenAI's error body, code model_not_found, and no routing headers. An engine's own
// 404 relayed by the gateway would carry x-prefix-router-decision and vLLM's code 404.
test('README quick start: unknown model is the gateway\'s 404 model_not_found', { timeout: 20_000 }, async () => {
  const check = (e) => {
    assert.ok(e instanceof OpenAI.APIError, `expected APIError, got ${e?.constructor?.name}: ${e}`);
    assert.ok(e instanceof OpenAI.NotFoundError, `expected NotFoundError, got ${e?.constructor?.name}: ${e}`);
    assert.equal(e.status, 404);
    assert.equal(e.code, 'model_not_found', JSON.stringify(e.error));
    assert.equal(e.type, 'not_found_error', JSON.stringify(e.error));
    assert.match(e.message, /no-such-model/);
    assert.equal(e.headers['x-prefix-router-decision'], undefined, JSON.stringify(e.headers));
    assert.equal(e.headers['x-prefix-router-instance'], undefined, JSON.stringify(e.headers));
    assert.ok(e.request_id, 'no x-request-id on the gateway\'s answer');
    return true;
  };
  await assert.rejects(client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 3 }), check);
  await assert.rejects(client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 3, stream: true }),
                       check);
});
