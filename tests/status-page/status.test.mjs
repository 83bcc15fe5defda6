// Browser test of the live status page (GET /status on the admin listener): the system's
// Chromium, driven by playwright-core, opens the page of a running `prefix-router serve` in
// front of two `prefix-router engine` emulators and one dead address, logging in the way a
// person would (HTTP Basic: the browser's dialog, any user name, the admin token as password),
// and checks the rendered DOM: a row per instance, numbers that change after traffic, the
// dead instance ejected, charts drawn, the measured hit rate beside the engines' own (their
// prefix-cache counters) and their queue and KV columns, the per-pool and per-model hit rates,
// nothing fetched from elsewhere, no script error, a page
// that fits 375 px and 1280 px wide, and 100 instances (97 added through the admin API at
// dead addresses) at both widths.
//
// Usage: tests/status-page/run.sh [PATH/TO/prefix-router]   (CTest: status_page.browser)
// Budget: under 60 s, ASan build included (most of it is Chromium starting).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { adminCall, chat, launchBrowser, startEngine, startGateway, stopAll } from './fleet.mjs';

let browser;
let gw;
let engines;

before(async () => {
  // --enable-prompt-tokens-details: usage carries cached tokens, as a vLLM run with the flag.
  const engineFlags = ['--profile', 'tiny-test', '--time-scale', '0.001', '--enable-prompt-tokens-details'];
  const [ports, b] = await Promise.all([Promise.all([startEngine(engineFlags), startEngine(engineFlags)]), launchBrowser()]);
  browser = b;
  engines = ports;
  gw = await startGateway([
    { name: 'engine-a', url: `http://127.0.0.1:${ports[0]}` },
    { name: 'engine-b', url: `http://127.0.0.1:${ports[1]}` },
    // Port 9 (discard) has no listener on a test machine: connects are refused at once.
    { name: 'dead', url: 'http://127.0.0.1:9' },
  ]);
});

after(async () => {
  if (browser) await browser.close();
  await stopAll();
});

// A page logged in with the admin token; collects script errors, console errors (a CSP
// violation is one) and every URL the page requested.
async function openStatus(width, height) {
  const context = await browser.newContext({
    viewport: { width, height },
    httpCredentials: { username: 'admin', password: gw.token },
  });
  const page = await context.newPage();
  const problems = [];
  const urls = [];
  page.on('pageerror', (e) => problems.push('pageerror: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console: ' + m.text()); });
  page.on('request', (r) => urls.push(r.url()));
  const response = await page.goto(gw.base + '/status');
  assert.equal(response.status(), 200);
  await waitUpdates(page, 1);
  return { context, page, problems, urls };
}

// Waits until the page has rendered status.json `n` times in total.
async function waitUpdates(page, n) {
  await page.waitForFunction((k) => Number(document.body.dataset.updates) >= k, n, { timeout: 15_000 });
}

const rowText = (page, name, key) =>
  page.locator(`#instances tbody tr[data-name="${name}"] td[data-k="${key}"]`).textContent();
const num = (s) => Number(s.replace(/[^0-9.]/g, ''));

// The page fits the viewport: no horizontal scroll of the page itself (wide tables scroll in
// their own box).
async function assertFits(page, width) {
  const scrollWidth = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(scrollWidth <= width, `page is ${scrollWidth} px wide in a ${width} px viewport`);
}

// Without the token the page and its data are refused like every admin route, with a Basic
// challenge that makes a browser ask for it (the other tests log in through that challenge).
test('without the token the page is 401', async () => {
  const r = await fetch(gw.base + '/status', { signal: AbortSignal.timeout(10_000) });
  assert.equal(r.status, 401);
  assert.match(r.headers.get('www-authenticate'), /Basic realm="prefix-router admin"/);
  assert.equal((await fetch(gw.base + '/status.json')).status, 401);
});

// Desktop width: rows, states, numbers that follow traffic, and charts.
test('1280 px: instance rows and numbers that change after traffic', { timeout: 45_000 }, async () => {
  const { context, page, problems, urls } = await openStatus(1280, 900);
  const names = await page.locator('#instances tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.name));
  assert.deepEqual(names, ['engine-a', 'engine-b', 'dead']);
  assert.equal(await rowText(page, 'engine-a', 'requests'), '0');
  assert.equal(await page.locator('#pools tbody tr').count(), 1);
  assert.match(await page.locator('#pools tbody tr').textContent(), /prefix-aware.*prefix_length 1024.*concurrency_threshold 4/);
  assert.match(await rowText(page, 'engine-a', 'in_flight'), /0 \/ 4/);

  // The dead instance is ejected by the health checks (every 0.5 s).
  await page.waitForSelector('#instances tr[data-name="dead"][data-state="ejected"]', { timeout: 10_000 });

  const keys = ['alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot'];
  const statuses = [];
  for (let i = 0; i < 24; ++i) statuses.push(await chat(gw.port, keys[i % keys.length], `q${i}`));
  assert.deepEqual(new Set(statuses), new Set([200]));

  await page.waitForFunction(() => document.getElementById('c-requests').textContent === '24', null, { timeout: 10_000 });
  const a = num(await rowText(page, 'engine-a', 'requests'));
  const b = num(await rowText(page, 'engine-b', 'requests'));
  assert.equal(a + b, 24);
  assert.equal(await rowText(page, 'dead', 'requests'), '0');
  const shareA = num(await rowText(page, 'engine-a', 'share'));
  const shareB = num(await rowText(page, 'engine-b', 'share'));
  assert.ok(Math.abs(shareA + shareB - 100) < 0.2, `${shareA} + ${shareB}`);
  const busy = a > 0 ? 'engine-a' : 'engine-b';
  assert.match(await rowText(page, busy, 'ttft_p50'), /\d+(\.\d+)? (ms|s)$/);
  assert.ok(num(await rowText(page, busy, 'affinity')) > 0);
  assert.equal(await rowText(page, 'dead', 'ttft_p50'), '–');

  // Hit rates: each key's prefix was sent 4 times to one engine, so both the measured rate
  // (cached / prompt tokens of the responses' usage) and the engine's own (its scraped
  // prefix-cache counters) are well above zero, and they agree; the dead instance has neither.
  const pct = /^\d+(\.\d)?%$/;
  await page.waitForFunction((name) => {
    const cell = (k) => document.querySelector(`#instances tr[data-name="${name}"] td[data-k="${k}"]`).textContent;
    return /%$/.test(cell('hit_rate')) && /%$/.test(cell('engine_hit_rate'));
  }, busy, { timeout: 10_000 });
  const measured = num(await rowText(page, busy, 'hit_rate'));
  const engine = num(await rowText(page, busy, 'engine_hit_rate'));
  assert.ok(measured > 20, `measured hit rate ${measured}%`);
  assert.ok(Math.abs(measured - engine) <= 1, `measured ${measured}% vs engine ${engine}%`);
  assert.match(await rowText(page, busy, 'engine_queue'), /^\d+ \+ \d+$/);
  assert.match(await rowText(page, busy, 'kv_usage'), pct);
  assert.equal(await rowText(page, 'dead', 'hit_rate'), '–');
  assert.equal(await rowText(page, 'dead', 'engine_hit_rate'), '–');
  assert.equal(await rowText(page, 'dead', 'engine_queue'), '–');
  assert.match(await page.locator('#c-hitrate').textContent(), pct);
  assert.match(await page.locator('#c-engine-hitrate').textContent(), pct);
  assert.match(await page.locator('#pools tbody tr td[data-k="hit_rate"]').textContent(), pct);
  assert.match(await page.locator('#pools tbody tr td[data-k="engine_hit_rate"]').textContent(), pct);
  // The per-model view: one row, every response with usage. Its name is the model label:
  // "llama" when the instances declare or discover it, else "other".
  assert.equal(await page.locator('#models tbody tr').count(), 1);
  const model = page.locator('#models tbody tr').first();
  assert.ok(['llama', 'other'].includes(await model.getAttribute('data-name')));
  assert.match(await model.locator('td[data-k="hit_rate"]').textContent(), pct);
  assert.equal(await model.locator('td[data-k="with_usage"]').textContent(), '100.0%');
  assert.ok(num(await model.locator('td[data-k="prompt"]').textContent()) > 0);

  // Charts: the rate line and the share bars of the current bucket, with a legend.
  await page.waitForSelector('#rate-chart polyline.rate-line');
  assert.ok(await page.locator('#share-chart rect').count() >= 1);
  assert.ok(await page.locator('#share-legend span').count() >= 1);
  assert.ok(num(await page.locator('#c-rps').textContent()) >= 0);

  await assertFits(page, 1280);
  assert.deepEqual(problems, []);
  assert.ok(urls.every((u) => u.startsWith(gw.base + '/status')), urls.join('\n'));
  assert.ok(urls.some((u) => u === gw.base + '/status.json'));
  await context.close();
});

// Phone width: the page fits, the table scrolls in its own box with the names kept in view.
test('375 px: fits a phone, the table scrolls inside the page', { timeout: 30_000 }, async () => {
  const { context, page, problems } = await openStatus(375, 740);
  await assertFits(page, 375);
  assert.equal(await page.locator('#instances tbody tr').count(), 3);
  const box = await page.locator('#instances tbody tr[data-name="engine-a"] td').first().boundingBox();
  assert.ok(box && box.x >= 0 && box.x + box.width <= 375, JSON.stringify(box));
  const cards = await page.locator('.card').evaluateAll((cs) => cs.map((c) => c.getBoundingClientRect().right));
  assert.ok(cards.every((r) => r <= 375), String(cards));
  const scroller = await page.locator('#instances').evaluate((t) => {
    const box = t.parentElement;
    return { inner: box.scrollWidth, outer: box.clientWidth };
  });
  assert.ok(scroller.outer <= 375, JSON.stringify(scroller));
  assert.deepEqual(problems, []);
  await context.close();
});

// 100 instances (97 added at run time at dead addresses): all rows render, the page still fits
// both widths, the filter finds one, and the page picks up added instances without a reload.
test('100 instances at 375 px and 1280 px', { timeout: 40_000 }, async () => {
  const { context, page, problems } = await openStatus(1280, 900);
  const added = await Promise.all(Array.from({ length: 97 }, (_, k) =>
    adminCall(gw, 'POST', '/admin/instances', { name: `dead-${k + 1}`, url: `http://127.0.0.1:9/i${k + 1}` })));
  for (const r of added) assert.equal(r.status, 201, r.body);
  await page.waitForFunction(() => document.querySelectorAll('#instances tbody tr').length === 100, null, { timeout: 10_000 });
  assert.match(await page.locator('#instances-note').textContent(), /^100 instances/);
  await assertFits(page, 1280);
  await page.setViewportSize({ width: 375, height: 740 });
  const before = Number(await page.evaluate(() => document.body.dataset.updates));
  await waitUpdates(page, before + 1);
  await assertFits(page, 375);
  await page.fill('#filter', 'dead-42');
  assert.equal(await page.locator('#instances tbody tr:not([hidden])').count(), 1);
  await page.fill('#filter', '');
  assert.equal(await page.locator('#instances tbody tr:not([hidden])').count(), 100);
  assert.equal(await page.locator('#c-available').textContent().then((t) => t.endsWith('/ 100')), true);
  assert.deepEqual(problems, []);
  await context.close();
});
