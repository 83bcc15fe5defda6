// A small fleet for the status page's browser test and screenshot: `prefix-router engine`
// emulators behind `prefix-router serve` with an admin listener (token from a file), all on
// ephemeral loopback ports read from their start-up log lines, and a browser (playwright-core
// driving the system's Chromium; no browser is downloaded).
//
// Every wait is bounded: a process must log its address within 15 s.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');

export function binary() {
  if (process.env.PREFIX_ROUTER_BIN) return resolve(process.env.PREFIX_ROUTER_BIN);
  for (const tree of ['build/release', 'build/test']) {
    const p = resolve(root, tree, 'src/prefix-router');
    if (existsSync(p)) return p;
  }
  throw new Error('prefix-router not found: set PREFIX_ROUTER_BIN or run scripts/build.sh release');
}

export function chromiumPath() {
  const p = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
  if (!existsSync(p)) throw new Error(`${p} not found: run scripts/setup.sh (Debian package chromium)`);
  return p;
}

const children = [];

// Spawns `bin args`, resolves with the captures of `pattern` once its output matches.
function start(args, pattern, label) {
  return new Promise((resolveMatch, reject) => {
    const child = spawn(binary(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let log = '';
    const timer = setTimeout(() => reject(new Error(`${label} did not start within 15 s:\n${log}`)), 15_000);
    const onData = (chunk) => {
      log += chunk.toString();
      const m = log.match(pattern);
      if (m) {
        clearTimeout(timer);
        resolveMatch(m);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${label} exited (code ${code}, signal ${signal}) before listening:\n${log}`));
    });
  });
}

// `extra`: more flags (the default profile and time scale answer at once: tests need no more).
export function startEngine(extra = ['--profile', 'tiny-test', '--time-scale', '0.001']) {
  return start(['engine', '--listen', '127.0.0.1:0', ...extra],
               /engine emulator on 127\.0\.0\.1:(\d+)/, 'engine').then((m) => Number(m[1]));
}

// Starts `serve` in front of `instances` ([{name, url}]) with `routing` (YAML flow mapping);
// resolves with {port, admin, token, base}.
export async function startGateway(instances, routing = '{routing_strategy: prefix-aware, prefix_length: 1024, concurrency_threshold: 4}') {
  const dir = mkdtempSync(join(tmpdir(), 'pr-status-'));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  const token = 'st4tus-page-' + Math.random().toString(36).slice(2);
  writeFileSync(join(dir, 'token'), token + '\n');
  const yaml = [
    'listen: 127.0.0.1:0',
    'io_threads: 2',
    `admin: {listen: 127.0.0.1:0, token_file: ${join(dir, 'token')}}`,
    // Fast checks so that a dead instance shows as ejected within a second or two.
    'health: {interval: 0.5, timeout: 0.5, unhealthy_threshold: 1, healthy_threshold: 1}',
    'timeouts: {drain: 1}',
    // The engines' own prefix-cache counters, for the page's engine hit rate and queue columns.
    'engine_metrics: {interval: 0.5}',
    `routing: ${routing}`,
    'instances:',
    ...instances.map((i) => `  - {name: ${i.name}, url: "${i.url}"}`),
  ].join('\n');
  writeFileSync(join(dir, 'router.yaml'), yaml + '\n');
  const m = await start(['serve', '--config', join(dir, 'router.yaml')],
                        /prefix-router listening on 127\.0\.0\.1:(\d+)[^]*admin listening on 127\.0\.0\.1:(\d+)|admin listening on 127\.0\.0\.1:(\d+)[^]*prefix-router listening on 127\.0\.0\.1:(\d+)/,
                        'serve');
  const port = Number(m[1] || m[4]);
  const admin = Number(m[2] || m[3]);
  return { port, admin, token, base: `http://127.0.0.1:${admin}` };
}

export async function stopAll() {
  await Promise.all(children.map((child) => {
    if (child.exitCode !== null || child.signalCode !== null) return null;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    return exited.then(() => clearTimeout(timer));
  }));
}

const system = 'You are a careful assistant for the accounting team. '.repeat(30);

// One chat request through the gateway; `key` picks the prefix (and so, prefix-aware, the instance).
export async function chat(port, key, user = 'hello') {
  const r = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'llama', max_tokens: 4, prompt_cache_key: key,
                           messages: [{ role: 'system', content: `${key}: ${system}` }, { role: 'user', content: user }] }),
    signal: AbortSignal.timeout(10_000),
  });
  await r.arrayBuffer();
  return r.status;
}

export async function adminCall(gw, method, path, body) {
  const r = await fetch(gw.base + path, {
    method,
    headers: { authorization: `Bearer ${gw.token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: r.status, body: await r.text() };
}

export function launchBrowser() {
  return chromium.launch({ executablePath: chromiumPath(), args: ['--no-sandbox'], headless: true });
}
