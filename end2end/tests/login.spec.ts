import { expect, test } from '../fixtures';
import { credentials, LoginPage, signInWithForm } from '../pages/login';

test('a page asked for without a session leads to the login and back', async ({ page }) => {
  await page.goto('/');
  await expect(page).toHaveURL(/\/login\?next=%2F$/);
  const login = new LoginPage(page);
  await login.submit(credentials('signout').username, 'not the password');
  await expect(login.error()).toHaveText('wrong username or password');
  await page.screenshot({ path: 'artifacts/login.png', fullPage: true });
  await signInWithForm(page, 'signout');
  await expect(page).toHaveURL(/\/$/);
  await expect(page.getByRole('heading', { level: 1, name: 'Overview' })).toBeVisible();
  await page.getByTestId('logout').click();
  await expect(page).toHaveURL(/\/login/);
  await page.goto('/');
  await expect(page).toHaveURL(/\/login/);
});
