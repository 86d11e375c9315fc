// `test` and `expect` for every spec: Playwright's, with an automatic
// fixture that fails a test when a page it opened reports a
// Content-Security-Policy violation. Sluice's pages allow scripts by nonce
// only; a script, preload or style the policy blocks would leave a page
// unhydrated or unstyled without failing anything else, so the browser's own
// report is the check. Pages from `browser.newPage()`/`newContext()` are
// watched as well as the test's `page`.
import { test as base, expect, type Browser, type BrowserContext } from '@playwright/test';

export { expect };

type Guard = { cspViolations: void };

export const test = base.extend<Guard>({
  cspViolations: [
    async ({ context, browser }, use, testInfo) => {
      const violations: string[] = [];
      const watch = async (ctx: BrowserContext) => {
        ctx.on('console', (msg) => {
          const text = msg.text();
          if (msg.type() === 'error' && /Content Security Policy|CSP violation/i.test(text)) {
            violations.push(`${msg.location().url}: ${text}`);
          }
        });
        // The browser's `securitypolicyviolation` event also catches what it
        // does not log (and init scripts are not themselves subject to the policy).
        await ctx.addInitScript(() => {
          document.addEventListener('securitypolicyviolation', (e) => {
            console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || 'inline'} on ${e.documentURI}`);
          });
        });
      };
      await watch(context);
      const b = browser as Browser & { newContext: Browser['newContext'] };
      const newContext = b.newContext;
      // browser.newPage() makes its context through newContext, so this covers both.
      b.newContext = async (...args: Parameters<Browser['newContext']>) => {
        const ctx = await newContext.apply(browser, args);
        await watch(ctx);
        return ctx;
      };
      try {
        await use();
      } finally {
        b.newContext = newContext;
      }
      expect(violations, `Content-Security-Policy violations in "${testInfo.title}"`).toEqual([]);
    },
    { auto: true },
  ],
});
