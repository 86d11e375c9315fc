import { expect, test } from '../fixtures';
import { signIn } from '../pages/login';
import { DeliveriesPage, MerchantsPage, MockMerchant, sendEvent, unique } from '../pages/deliveries';

// Non-money events answered 410 fail at once; once the merchant answers 200
// again, support retries the whole filtered set and watches it go through.
test('a bulk retry of a filter', async ({ browser }) => {
  let answer = 410;
  const endpoint = await MockMerchant.start(() => answer);
  try {
    const admin = await browser.newPage();
    await signIn(admin, 'admin', '/merchants');
    const merchants = new MerchantsPage(admin);
    await merchants.open();
    const merchantId = await merchants.add(unique('Bulk Shop'), endpoint.url);
    for (let i = 0; i < 3; i++) await sendEvent(admin.request, merchantId, 'order.created');

    const page = await browser.newPage();
    await signIn(page, 'support', '/deliveries');
    const deliveries = new DeliveriesPage(page);
    const failed = { merchant: merchantId, status: 'FAILED' };
    await deliveries.waitForRows(failed, 3);
    answer = 200;
    await expect(page.locator('.frame[data-hydrated="true"]')).toHaveCount(1);
    await page.getByTestId('bulk-start').click();
    await expect(page.getByTestId('bulk-count')).toContainText('3 deliveries match: 3 FAILED');
    await page.screenshot({ path: 'artifacts/deliveries.png', fullPage: true });
    await page.getByTestId('bulk-confirm').click();
    await expect(page.getByTestId('bulk-done')).toHaveText('Done: 3 deliveries retried.');
    await deliveries.waitForRows({ merchant: merchantId, status: 'DELIVERED' }, 3);
    await deliveries.open({ merchant: merchantId, status: 'FAILED' });
    await expect(page.getByTestId('no-deliveries')).toBeVisible();
  } finally {
    await endpoint.stop();
  }
});
