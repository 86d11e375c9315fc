import { expect, test } from '../fixtures';
import { signIn } from '../pages/login';
import { BreakersPage, MerchantsPage, MockMerchant, reportUpstream, sendEvent, unique } from '../pages/deliveries';

// An endpoint that fails opens its merchant's breaker for real (≥ 5 attempts
// in 5 min, ≥ 80 % failed, sent by the server's own delivery worker); the
// endpoint is then fixed and support resets the breaker with a reason.
test('support resets an open breaker and sees it closed and audited', async ({ browser }) => {
  let failing = true;
  const endpoint = await MockMerchant.start(() => (failing ? 503 : 200));
  const name = unique('Breaker Shop');
  try {
    const admin = await browser.newPage();
    await signIn(admin, 'admin', '/merchants');
    const merchants = new MerchantsPage(admin);
    await merchants.open();
    const merchantId = await merchants.add(name, endpoint.url);
    await admin.screenshot({ path: 'artifacts/merchants.png', fullPage: true });

    for (let i = 0; i < 5; i++) await sendEvent(admin.request, merchantId, 'order.created');

    const page = await browser.newPage();
    await signIn(page, 'support', '/breakers');
    const breakers = new BreakersPage(page);
    await breakers.waitForState(merchantId, 'open');
    failing = false; // the merchant fixed their endpoint
    const reason = `endpoint fixed (${name})`;
    await breakers.reset(merchantId, reason);
    await expect(page.getByTestId('reset-done')).toBeVisible();
    await expect(breakers.state(merchantId)).toHaveText('closed');
    await expect(page.getByTestId('reset-row').filter({ hasText: reason })).toContainText('breaker.reset');
    await expect(page.getByTestId('reset-row').filter({ hasText: reason })).toContainText('e2e-support');
    await page.screenshot({ path: 'artifacts/breakers.png', fullPage: true });
  } finally {
    await endpoint.stop();
  }
});

// A worker in any language reports five 503s in a row over the API: the
// upstream breaker of that account and scope opens, shows its failures and
// next probe, and support resets it with a reason.
test('support resets an open upstream breaker fed over the API', async ({ browser }) => {
  const account = unique('seller').replace(/\s+/g, '-');
  const scope = 'vtex_pricing';
  const page = await browser.newPage();
  await signIn(page, 'support', '/breakers');
  for (let i = 0; i < 5; i++) await reportUpstream(page.request, account, scope, 503);
  const breakers = new BreakersPage(page);
  await breakers.open();
  const row = breakers.upstream(account, scope);
  await expect(row.getByTestId('upstream-state')).toHaveText('open');
  await expect(row.getByTestId('upstream-failures')).toHaveText('5');
  await expect(row.getByTestId('upstream-next-probe')).not.toHaveText('—');
  await page.screenshot({ path: 'artifacts/upstream-breakers.png', fullPage: true });
  const reason = `upstream incident over (${account})`;
  await breakers.resetUpstream(account, scope, reason);
  await expect(page.getByTestId('reset-done')).toBeVisible();
  await expect(breakers.upstream(account, scope)).toHaveCount(0);
  await expect(page.getByTestId('reset-row').filter({ hasText: reason })).toContainText('upstream_breaker.reset');
  await expect(page.getByTestId('reset-row').filter({ hasText: reason })).toContainText('e2e-support');
});
