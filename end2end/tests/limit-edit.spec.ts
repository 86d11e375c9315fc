import { type APIRequestContext } from '@playwright/test';
import { expect, test } from '../fixtures';
import { AuditLogPage } from '../pages/audit';
import { LimitsPage } from '../pages/limits';
import { apiToken, signIn } from '../pages/login';

/** Ask for a permit without waiting; `wait_ms` > 0 means "not now". */
async function permit(request: APIRequestContext, scope: string, account: string) {
  const resp = await request.post('/api/v1/permits', {
    headers: { Authorization: `Bearer ${apiToken('worker')}` },
    data: { account, scope, method: 'GET', path: '/orders', max_wait_ms: 0 },
  });
  return { status: resp.status(), body: await resp.json() };
}

test('an admin fixes an invalid limit and the permits API enforces the new one', async ({ page, request }) => {
  const scope = `e2e_limit_${Date.now()}`;
  await signIn(page, 'admin', '/limits');
  const limits = new LimitsPage(page);
  await limits.open('?new=1');

  // A rule to edit: 5 per minute.
  await limits.fill({ scope, tokens: '5', interval: '1m', note: 'browser test' });
  await limits.submit();
  await expect(limits.saved()).toBeVisible();
  await expect(limits.row(scope)).toHaveCount(1);
  await expect(limits.row(scope).getByTestId('rate')).toHaveText('5 / 1m');

  await limits.row(scope).getByTestId('edit').click();
  await expect(limits.form().getByRole('heading')).toContainText('Edit rule');
  await expect(limits.field('tokens')).toHaveValue('5');

  // Invalid: zero tokens. The message sits next to the field; the typed values stay.
  await limits.fill({ tokens: '0', interval: '1m' });
  await limits.submit();
  await expect(limits.fieldError('tokens')).toHaveText('must be at least 1');
  await expect(limits.field('tokens')).toHaveAttribute('aria-invalid', 'true');
  await expect(limits.field('tokens')).toHaveValue('0');
  await expect(limits.field('note')).toHaveValue('browser test');
  await page.screenshot({ path: 'artifacts/limit-form.png', fullPage: true });
  await expect(limits.row(scope).getByTestId('rate')).toHaveText('5 / 1m');

  // Valid: 2 per minute.
  await limits.fill({ tokens: '2' });
  await limits.submit();
  await expect(limits.saved()).toBeVisible();
  await expect(limits.fieldError('tokens')).toHaveCount(0);
  await expect(limits.row(scope).getByTestId('rate')).toHaveText('2 / 1m');
  // max_wait empty: the ceiling is max(30 s, 1 min + 5 s).
  await expect(limits.row(scope).getByTestId('ceiling')).toHaveText('65s');

  // Enforced at once: two permits now, the third must wait (or is refused).
  const account = `acct_${Date.now()}`;
  for (let n = 0; n < 2; n++) {
    const { status, body } = await permit(request, scope, account);
    expect(status, JSON.stringify(body)).toBe(200);
    expect(body.wait_ms).toBe(0);
  }
  const third = await permit(request, scope, account);
  expect(third.status === 429 || third.body.wait_ms > 20_000, JSON.stringify(third.body)).toBe(true);

  // The tester names the rule; its history shows the edit.
  const result = await limits.test(scope, 'GET', '/orders/1');
  await expect(result).toContainText('2 / 1m');
  await limits.row(scope).getByRole('link', { name: 'History' }).click();
  const history = page.getByTestId('rule-history');
  await expect(history.locator('tbody tr')).toHaveCount(2);
  await expect(history.locator('li[data-field="tokens"]').first()).toContainText('5 → 2');
  await page.goto('/limits');
  await expect(limits.row(scope)).toHaveCount(1);
  await page.screenshot({ path: 'artifacts/limits.png', fullPage: true });

  // The audit log has the create and the update.
  const ruleId = await limits.row(scope).getAttribute('data-rule');
  expect(ruleId).toBeTruthy();
  const audit = new AuditLogPage(page);
  await audit.open({ action: 'limit', target: ruleId ?? '' });
  await expect(audit.rows()).toHaveCount(2);
  await expect(audit.rows().first()).toContainText('limit.update');
  await expect(audit.rows().first().locator('li[data-field="tokens"]')).toContainText('5 → 2');
  await expect(audit.rows().nth(1)).toContainText('limit.create');
  await page.screenshot({ path: 'artifacts/audit.png', fullPage: true });
});

test('viewers see the limits but no controls that would be refused', async ({ page }) => {
  await signIn(page, 'viewer', '/limits');
  const limits = new LimitsPage(page);
  await limits.open();
  await expect(limits.rows().first()).toBeVisible();
  await expect(page.getByTestId('edit')).toHaveCount(0);
  await expect(page.getByTestId('new-rule')).toHaveCount(0);
  const result = await limits.test('no_such_scope_here', 'GET', '/x');
  await expect(result).toContainText('Refused: no rule');
});
