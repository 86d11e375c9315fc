import { expect, test } from '../fixtures';
import { signIn } from '../pages/login';
import { DeliveryPage, MerchantsPage, MockMerchant, sendEvent, unique } from '../pages/deliveries';

// Two 503s, then 200: the fast ladder retries after 1 s and 2 s, and the
// page shows every attempt with its HTTP code and what the merchant answered.
test("a delivery's timeline shows its attempts", async ({ page }) => {
  const endpoint = await MockMerchant.start((n) => (n <= 2 ? { status: 503, body: `shop is busy (${n})` } : { status: 200, body: 'thanks' }));
  try {
    await signIn(page, 'admin', '/merchants');
    const merchants = new MerchantsPage(page);
    await merchants.open();
    const merchantId = await merchants.add(unique('Timeline Shop'), endpoint.url);
    const id = await sendEvent(page.request, merchantId, 'payment.status_changed', 'paid');

    const delivery = new DeliveryPage(page);
    await delivery.waitForStatus(id, 'DELIVERED');
    await expect(delivery.attempts).toHaveCount(3);
    await expect(delivery.attempts.getByTestId('attempt-code')).toHaveText(['503', '503', '200']);
    await expect(delivery.planned).toHaveCount(0);
    await expect(page.getByTestId('ceilings')).toContainText('30 days');
    await expect(page.getByTestId('payload')).toContainText('"status": "paid"');
    await expect(delivery.answers).toHaveCount(3);
    await expect(delivery.answers.getByTestId('attempt-response')).toHaveText(['shop is busy (1)', 'shop is busy (2)', 'thanks']);
    await expect(delivery.answers.first()).toContainText('HTTP 503');
    await expect(delivery.answers.first().getByTestId('attempt-id')).toBeVisible();
    await delivery.answers.first().getByText(/Headers sent/).click();
    await expect(delivery.answers.first().getByTestId('attempt-request-headers')).toContainText('x-webhook-signature');
    await expect(page.getByTestId('retention')).toContainText('Retention deletes this delivery');
    await page.screenshot({ path: 'artifacts/delivery.png', fullPage: true });
  } finally {
    await endpoint.stop();
  }
});
