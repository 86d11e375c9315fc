import { type APIRequestContext } from '@playwright/test';
import { expect, test } from '../fixtures';
import { apiToken, signIn } from '../pages/login';
import { OverviewPage } from '../pages/overview';
import { QuotaAccountPage, QuotasPage } from '../pages/quotas';

const RULE = 'vtex_pricing_put';

async function permit(request: APIRequestContext, account: string) {
  const resp = await request.post('/api/v1/permits', {
    headers: { Authorization: `Bearer ${apiToken('worker')}` },
    data: { account, scope: 'vtex_pricing', method: 'PUT', path: '/pricing/sku/1' },
  });
  expect(resp.status(), await resp.text()).toBe(200);
}

async function penalty(request: APIRequestContext, account: string) {
  const resp = await request.post('/api/v1/penalties', {
    headers: { Authorization: `Bearer ${apiToken('worker')}` },
    data: { account, scope: 'vtex_pricing', method: 'PUT', path: '/pricing/sku/1', status_429: true, retry_after: '1' },
  });
  expect(resp.ok(), await resp.text()).toBeTruthy();
}

test('an operator watches a bucket’s numbers change live while traffic runs', async ({ page, request }) => {
  const account = `shop-${Date.now()}`;
  const other = `other-${Date.now()}`;
  await permit(request, account);
  await permit(request, other);

  await signIn(page, 'viewer');
  const quotas = new QuotasPage(page);
  await quotas.open();
  await quotas.searchFor(account);
  await expect(quotas.row(account, RULE)).toBeVisible();
  await expect(quotas.row(other, RULE)).toHaveCount(0);
  await expect(quotas.rows()).toHaveCount(1);
  await quotas.waitUntilLive();

  // From here on the page must not load again: count document navigations.
  let navigations = 0;
  page.on('framenavigated', (frame) => {
    if (frame === page.mainFrame()) navigations += 1;
  });
  const before = await quotas.number(account, RULE, 'grants');
  expect(before).toBe(1);

  // Traffic runs while the page is open.
  for (let i = 0; i < 5; i++) await permit(request, account);
  await expect.poll(() => quotas.number(account, RULE, 'grants'), { timeout: 15_000 }).toBe(6);
  await penalty(request, account);
  await expect.poll(() => quotas.number(account, RULE, 'penalties'), { timeout: 15_000 }).toBe(1);
  await expect(quotas.freshness).toContainText(/live · updated \d+ s ago/);
  expect(navigations).toBe(0);
  await page.screenshot({ path: 'artifacts/quotas.png', fullPage: true });

  // A hidden tab closes the stream; showing it again resumes.
  await page.evaluate(() => {
    Object.defineProperty(document, 'hidden', { configurable: true, get: () => true });
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'hidden' });
    document.dispatchEvent(new Event('visibilitychange'));
  });
  await expect(quotas.freshness).toHaveAttribute('data-state', 'paused');
  await permit(request, account);
  await page.evaluate(() => {
    Object.defineProperty(document, 'hidden', { configurable: true, get: () => false });
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'visible' });
    document.dispatchEvent(new Event('visibilitychange'));
  });
  await expect(quotas.freshness).toHaveAttribute('data-state', 'live');
  await expect.poll(() => quotas.number(account, RULE, 'grants'), { timeout: 15_000 }).toBe(7);
  expect(navigations).toBe(0);

  // The account's own page: its bucket and the two charts.
  await quotas.row(account, RULE).getByRole('link', { name: account }).click();
  const accountPage = new QuotaAccountPage(page);
  await expect(page).toHaveURL(new RegExp(`/quotas/${account}$`));
  await expect(accountPage.usageChart.locator('svg')).toHaveCount(1);
  await expect(accountPage.penaltiesChart.locator('svg')).toHaveCount(1);
  await expect(quotas.row(account, RULE)).toBeVisible();
  await page.screenshot({ path: 'artifacts/quota-account.png', fullPage: true });

  // The overview points at the quotas: the last hour's 429s, refusals and waits.
  const overview = new OverviewPage(page);
  await overview.open();
  await expect(overview.attention('penalties')).toHaveAttribute('href', '/quotas');
  await expect(overview.attention('open-breakers')).toHaveAttribute('href', '/breakers');
  await expect(overview.attention('failed-deliveries')).toHaveAttribute('href', '/deliveries?status=failed');
  // The account above holds a bucket, so the store holds at least one.
  await expect(page.getByTestId('live-buckets-count')).toHaveText(/^[1-9]\d*$/);
  await page.screenshot({ path: 'artifacts/overview.png', fullPage: true });
});

test('the quotas search works without JavaScript', async ({ browser, request }) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  const account = `nojs-${Date.now()}`;
  await permit(request, account);
  await signIn(page, 'viewer', '/quotas');
  const quotas = new QuotasPage(page);
  await quotas.open();
  await quotas.searchFor(account);
  await expect(quotas.rows()).toHaveCount(1);
  await expect(quotas.row(account, RULE).getByTestId('grants')).toHaveText('1');
  await expect(quotas.freshness).toHaveAttribute('data-state', 'static');
  await context.close();
});
