import { expect, test } from '../fixtures';
import { OverviewPage } from '../pages/overview';
import { credentials, signIn } from '../pages/login';

test('the server-rendered overview hydrates and its clock ticks in the browser', async ({ page }) => {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await signIn(page, 'viewer');
  const overview = new OverviewPage(page);
  await overview.open();
  await overview.waitForHydration();
  // The clock only moves when the wasm client runs: a broken hydration fails here.
  await expect.poll(() => overview.secondsSinceUpdate(), { timeout: 8_000 }).toBeGreaterThanOrEqual(2);
  await expect(overview.database).toContainText('up');
  await page.screenshot({ path: 'artifacts/overview.png', fullPage: true });
  expect(errors).toEqual([]);
});

test('a first visit downloads the frame and the pages of the one it opens, not every page', async ({ page }) => {
  await signIn(page, 'viewer');
  const pages: string[] = [];
  page.on('request', (r) => {
    const m = /\/pkg\/split_([a-z]+)_pages_/.exec(r.url());
    if (m) pages.push(m[1]);
  });
  const overview = new OverviewPage(page);
  await overview.open();
  await overview.waitForHydration();
  expect(pages).toEqual(['watch']);
  // The server named the page's chunks in the head, so they were fetched
  // alongside the main module; no other page's.
  await expect(page.locator('head link[rel="preload"][href*="/split_watch_pages_"]')).toHaveCount(1);
  await expect(page.locator('head link[rel="preload"][href*="/split_limit_pages_"]')).toHaveCount(0);
  // Another page's code arrives when that page is first shown.
  await page.locator('nav.sidebar').getByRole('link', { name: 'Limits', exact: true }).click();
  await expect(page).toHaveURL(/\/limits$/);
  await expect.poll(() => pages).toEqual(['watch', 'limit']);
});

test('the overview is readable without JavaScript', async ({ browser }) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  // Without JavaScript the login form is a plain HTML form post.
  await page.goto('/login');
  await page.getByLabel('Username').fill(credentials('viewer').username);
  await page.getByLabel('Password').fill(credentials('viewer').password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  const overview = new OverviewPage(page);
  await overview.open();
  await expect(overview.database).toContainText('up');
  await expect(overview.quotaStore).toBeVisible();
  // No script ran, so nothing hydrated and the clock stands still.
  await expect(page.locator('.frame[data-hydrated="true"]')).toHaveCount(0);
  await context.close();
});
