// First visits of the console's pages, as a new browser sees them: for each
// page, a fresh browser context (empty cache, signed in), the time from
// navigation to the frame's data-hydrated="true" (the page's chunks loaded
// and hydrated), and the wasm files and bytes it fetched. Median of RUNS.
// Run by scripts/bench-first-visit.sh, which starts the server.
import { chromium } from '@playwright/test';

const base = process.env.SLUICE_URL;
const runs = Number(process.env.RUNS ?? 5);
const pages = ['/login', '/', '/quotas', '/limits', '/deliveries', '/merchants', '/breakers', '/simulator', '/audit', '/users'];
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium' });
const signedIn = await browser.newContext();
const page = await signedIn.newPage();
await page.goto(`${base}/login`);
await page.waitForSelector('.frame[data-hydrated="true"]');
await page.getByLabel('Username').fill(process.env.SLUICE_USER);
await page.getByLabel('Password').fill(process.env.SLUICE_PASSWORD);
await page.getByRole('button', { name: 'Sign in' }).click();
await page.waitForURL(`${base}/`);
const state = await signedIn.storageState();

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(['page', 'hydrated ms (median)', 'min', 'max', 'wasm files', 'wasm bytes on the wire'].join('\t'));
for (const path of pages) {
  const times = [];
  let files = 0;
  let bytes = 0;
  for (let i = 0; i < runs; i++) {
    const context = await browser.newContext({ storageState: path === '/login' ? undefined : state });
    await context.addInitScript(() => {
      new MutationObserver(() => {
        const frame = document.querySelector('.frame');
        if (frame?.dataset.hydrated === 'true' && window.__hydratedAt === undefined) window.__hydratedAt = performance.now();
      }).observe(document, { attributes: true, subtree: true, childList: true });
    });
    const p = await context.newPage();
    await p.goto(base + path);
    await p.waitForSelector('.frame[data-hydrated="true"]');
    const r = await p.evaluate(() => {
      const wasm = performance.getEntriesByType('resource').filter((e) => e.name.endsWith('.wasm'));
      return { at: window.__hydratedAt, files: wasm.length, bytes: wasm.reduce((n, e) => n + e.transferSize, 0) };
    });
    times.push(r.at);
    files = r.files;
    bytes = r.bytes;
    await context.close();
  }
  console.log([path, Math.round(median(times)), Math.round(Math.min(...times)), Math.round(Math.max(...times)), files, bytes].join('\t'));
}
await browser.close();
