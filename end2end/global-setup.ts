// Sign in once per role before the browser tests and keep each session's
// cookies in .auth/<role>.json. Journeys start from these sessions
// (`signIn`), so a run signs each test user in once instead of once per
// journey: Sluice throttles sign-in attempts to 5 per username per minute,
// successful ones included, and a suite that signed in per journey would be
// throttled by the product it tests. The login form itself is exercised by
// login.spec.ts and the no-JavaScript journeys.
import { request, type FullConfig } from '@playwright/test';
import { credentials, type Role } from './pages/login';

export default async function globalSetup(config: FullConfig) {
  const baseURL = config.projects[0].use.baseURL as string;
  for (const role of ['viewer', 'support', 'admin'] as Role[]) {
    const { username, password } = credentials(role);
    const context = await request.newContext({ baseURL });
    // A plain form post, as a browser without JavaScript sends it; the CSRF
    // guard wants the page's own origin on writes.
    const resp = await context.post('/ui/login', {
      form: { username, password, next: '/' },
      headers: { Origin: new URL(baseURL).origin },
    });
    if (!resp.ok()) throw new Error(`signing in ${username} failed: ${resp.status()} ${await resp.text()}`);
    const state = await context.storageState({ path: `.auth/${role}.json` });
    if (!state.cookies.some((c) => c.name === 'sluice_session')) {
      throw new Error(`signing in ${username} set no session cookie`);
    }
    await context.dispose();
  }
}
