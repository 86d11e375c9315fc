import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, type Page } from '@playwright/test';

/** The roles scripts/test.sh creates users for before the browser tests. */
export type Role = 'viewer' | 'support' | 'admin';
/** A role's user, or `signout`: a viewer of its own for the journey that
 * signs out (which ends every session of its user). */
export type TestUser = Role | 'signout';

export function credentials(role: TestUser): { username: string; password: string } {
  const username = process.env[`E2E_${role.toUpperCase()}_USER`];
  const password = process.env[`E2E_${role.toUpperCase()}_PASSWORD`];
  if (!username || !password) throw new Error(`E2E_${role.toUpperCase()}_USER/PASSWORD not set (scripts/test.sh sets them)`);
  return { username, password };
}

/** An API token scripts/test.sh created (`worker` or `admin` scope). */
export function apiToken(scope: 'worker' | 'admin'): string {
  const token = process.env[`E2E_${scope.toUpperCase()}_TOKEN`];
  if (!token) throw new Error(`E2E_${scope.toUpperCase()}_TOKEN not set (scripts/test.sh sets it)`);
  return token;
}

/** The sign-in page. */
export class LoginPage {
  constructor(readonly page: Page) {}

  async open(next?: string) {
    await this.page.goto(next ? `/login?next=${encodeURIComponent(next)}` : '/login');
    await expect(this.page.getByRole('heading', { name: 'Sign in to Sluice' })).toBeVisible();
  }

  async submit(username: string, password: string) {
    await this.page.getByLabel('Username').fill(username);
    await this.page.getByLabel('Password').fill(password);
    await this.page.getByRole('button', { name: 'Sign in' }).click();
  }

  error() {
    return this.page.getByTestId('login-error');
  }
}

/**
 * Start as the test user of `role`, signed in, on `next` (default the
 * overview): the session global-setup.ts made for the role goes into the
 * page's browser context. Waits until the sidebar shows who is signed in.
 */
export async function signIn(page: Page, role: Role, next = '/') {
  const state = JSON.parse(readFileSync(join(__dirname, '..', '.auth', `${role}.json`), 'utf8'));
  await page.context().addCookies(state.cookies);
  await page.goto(next);
  await expect(page.getByTestId('userbox')).toContainText(credentials(role).username);
}

/** Sign in through the login form (what login.spec.ts tests), landing on `next`. */
export async function signInWithForm(page: Page, role: TestUser, next = '/') {
  const { username, password } = credentials(role);
  const login = new LoginPage(page);
  await login.open(next);
  await login.submit(username, password);
  await expect(page.getByTestId('userbox')).toContainText(username);
}
