import { expect, test } from '@playwright/test';
import { signIn } from '../pages/login';
import { BreakersPage, MerchantsPage, MockMerchant, sendEvent, unique } from '../pages/deliveries';

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
