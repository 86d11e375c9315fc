import { expect, type APIRequestContext, type Page } from '@playwright/test';
import { apiToken } from './login';
import { MerchantsPage, MockMerchant, sendEvent, unique } from './deliveries';

/**
 * Every page of the console, with data that makes them full and wide: a
 * merchant with a long name and a delivery to it (long ids in cards), a
 * quota account with a long name. Signed in as admin (who sees every page)
 * on `page`; stop the returned merchant endpoint when done.
 */
export async function everyPage(page: Page, request: APIRequestContext): Promise<{ pages: [string, string][]; endpoint: MockMerchant }> {
  const endpoint = await MockMerchant.start(() => 200);
  const merchants = new MerchantsPage(page);
  await merchants.open();
  const merchantId = await merchants.add(unique('Console Shop with a rather long trading name'), endpoint.url);
  const delivery = await sendEvent(page.request, merchantId, 'payment.status_changed', 'paid');
  const account = `console-account-with-a-long-name-${Date.now()}`;
  const permit = await request.post('/api/v1/permits', {
    headers: { Authorization: `Bearer ${apiToken('worker')}` },
    data: { account, scope: 'vtex_pricing', method: 'PUT', path: '/pricing/sku/1' },
  });
  expect(permit.status(), await permit.text()).toBe(200);
  return {
    endpoint,
    pages: [
      ['overview', '/'],
      ['quotas', '/quotas'],
      ['quota-account', `/quotas/${account}`],
      ['limits', '/limits'],
      ['deliveries', '/deliveries'],
      ['delivery', `/deliveries/${delivery}`],
      ['merchants', '/merchants'],
      ['breakers', '/breakers'],
      ['simulator', '/simulator'],
      ['audit', '/audit'],
      ['users', '/users'],
    ],
  };
}

/** Resolves once the wasm client has hydrated the page. */
export async function hydrated(page: Page) {
  await expect(page.locator('.frame[data-hydrated="true"]')).toHaveCount(1);
}
