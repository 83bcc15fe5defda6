// Makes the status page screenshot of docs/operating.md (scripts/status-screenshot.sh runs it):
// five engine emulators (the default 70B profile, 10x faster than real time) and one dead
// address behind `serve`, prefix-aware with a concurrency threshold of 4; about 45 s of
// traffic from 16 concurrent clients over 40 prefixes with a skewed popularity, one instance
// drained half-way; then, with the traffic still running, a 1280 px wide screenshot of the
// whole page.
//
// Usage: node screenshot.mjs OUT.png   (binary from $PREFIX_ROUTER_BIN, or build/release)
import { chat, adminCall, launchBrowser, startEngine, startGateway, stopAll } from './fleet.mjs';

const out = process.argv[2];
if (!out) throw new Error('usage: node screenshot.mjs OUT.png');
const seconds = Number(process.env.TRAFFIC_SECONDS || 45);

try {
  const ports = await Promise.all([1, 2, 3, 4, 5].map(() => startEngine(['--time-scale', '0.1'])));
  const gw = await startGateway([
    ...ports.map((port, i) => ({ name: `engine-${i + 1}`, url: `http://127.0.0.1:${port}` })),
    { name: 'engine-6', url: 'http://127.0.0.1:9' },
  ], '{routing_strategy: prefix-aware, prefix_length: 1024, concurrency_threshold: 4, balance_factor: 1.5}');
  const keys = Array.from({ length: 40 }, (_, i) => `tenant-${i}`);
  const pick = () => keys[Math.floor(keys.length * Math.random() ** 2)];  // skewed: low ids are hot
  const start = Date.now();
  let stop = false;
  let drained = false;
  const client = async (id) => {
    let n = 0;
    while (!stop) {
      await chat(gw.port, pick(), `question ${id}-${n++}`);
      // Ramp up: idle pauses shrink over the run.
      const done = Math.min(1, (Date.now() - start) / (seconds * 1000));
      await new Promise((r) => setTimeout(r, 200 * (1 - done) + 5));
      if (!drained && done > 0.5) {
        drained = true;
        await adminCall(gw, 'POST', '/admin/instances/engine-5/drain');
      }
    }
  };
  const clients = Promise.all(Array.from({ length: 16 }, (_, i) => client(i)));
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const browser = await launchBrowser();
  const context = await browser.newContext({
    viewport: { width: 1280, height: 900 },
    httpCredentials: { username: 'admin', password: gw.token },
    colorScheme: 'light',
  });
  const page = await context.newPage();
  await page.goto(gw.base + '/status');
  await page.waitForFunction(() => Number(document.body.dataset.updates) >= 1, null, { timeout: 15_000 });
  await page.screenshot({ path: out, fullPage: true });
  await browser.close();
  stop = true;
  await clients;
  console.log(`wrote ${out}`);
} finally {
  await stopAll();
}
