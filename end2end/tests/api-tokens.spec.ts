import { expect, test } from '../fixtures';
import { signIn } from '../pages/login';

// An admin creates a worker token on the Users page, a worker uses it for a
// permit, the admin revokes it, and the very next permit is refused: the
// instance that served the page forgets the token at once, despite the
// per-instance token cache.
test('an admin creates an API token, a worker uses it, a revocation stops it at once', async ({ page, request }) => {
  await signIn(page, 'admin', '/users');
  await expect(page.getByRole('heading', { level: 1, name: 'Users and API tokens' })).toBeVisible();
  await expect(page.locator('.frame[data-hydrated="true"]')).toHaveCount(1);
  const name = `e2e-token-${Date.now()}`;
  const form = page.getByTestId('add-token');
  await form.getByLabel('Name').fill(name);
  await form.getByLabel('Scope').selectOption('worker');
  await form.getByRole('button', { name: 'Create token' }).click();
  const secret = (await page.getByTestId('one-time-secret').textContent())?.trim() ?? '';
  expect(secret).toMatch(/^slk_/);
  const row = page.locator(`tr[data-testid="token-row"][data-token="${name}"]`);
  await expect(row.getByTestId('token-state')).toHaveText('live');
  await page.screenshot({ path: 'artifacts/users.png', fullPage: true });

  const permit = () =>
    request.post('/api/v1/permits', {
      headers: { Authorization: `Bearer ${secret}` },
      data: { account: `tok-${Date.now()}`, scope: 'vtex_pricing', method: 'PUT', path: '/pricing/sku/1', max_wait_ms: 0 },
    });
  expect((await permit()).status()).toBe(200);

  await row.getByRole('button', { name: 'Revoke' }).click();
  await expect(row.getByTestId('token-state')).toHaveText('revoked');
  const refused = await permit();
  expect(refused.status()).toBe(401);
  expect((await refused.json()).code).toBe('unauthorized');
});
