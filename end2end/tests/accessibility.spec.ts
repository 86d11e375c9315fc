// axe-core (its Playwright integration) on every page, signed in as admin
// so every control is there: no serious or critical violation (unlabelled
// form controls, contrast, names of links and buttons, ARIA misuse, …).
import AxeBuilder from '@axe-core/playwright';
import { expect, test } from '../fixtures';
import { signIn } from '../pages/login';
import { everyPage, hydrated } from '../pages/all-pages';

test('axe finds no serious or critical violation on any page', async ({ page, request }) => {
  test.setTimeout(120_000);
  await signIn(page, 'admin', '/merchants');
  const { pages, endpoint } = await everyPage(page, request);
  try {
    const found: string[] = [];
    for (const [name, path] of [...pages, ['login', '/login'] as [string, string]]) {
      if (name === 'login') await page.context().clearCookies();
      await page.goto(path);
      if (name !== 'login') await hydrated(page);
      const results = await new AxeBuilder({ page }).analyze();
      for (const v of results.violations) {
        if (v.impact !== 'serious' && v.impact !== 'critical') continue;
        const where = v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ');
        found.push(`${name}: ${v.id} (${v.impact}) ${v.help} at ${where}`);
      }
    }
    expect(found).toEqual([]);
  } finally {
    await endpoint.stop();
  }
});
