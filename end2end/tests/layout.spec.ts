// Every page at desktop widths (1280 and 1440 px) and a phone's (390 px):
// the document is never wider than the window (a wide table scrolls inside
// its own box), no card lets its content out on a desktop, and the Limits
// table fits a 1440 px screen. A screenshot of each page at 1440 × 900 and
// 390 × 844 lands in artifacts/pages/.
import { type Page } from '@playwright/test';
import { expect, test } from '../fixtures';
import { signIn } from '../pages/login';
import { everyPage, hydrated } from '../pages/all-pages';

const WIDTHS = [
  { width: 1280, height: 800, name: 'desktop-1280' },
  { width: 1440, height: 900, name: 'desktop' },
  { width: 390, height: 844, name: 'phone' },
];

/** What sticks out: the document's width, and elements past the window's right edge. */
async function overflow(page: Page) {
  return page.evaluate(() => {
    const view = document.documentElement.clientWidth;
    const culprits: string[] = [];
    for (const el of Array.from(document.querySelectorAll('body *'))) {
      // Inside a scrolling table box an element may be far right: that is the point.
      if (el.closest('.table-scroll')) continue;
      const r = el.getBoundingClientRect();
      if (r.width > 0 && r.right > view + 1) {
        culprits.push(`${el.tagName.toLowerCase()}.${el.className} right=${Math.round(r.right)}`);
      }
    }
    return { documentWidth: document.documentElement.scrollWidth, view, culprits: culprits.slice(0, 8) };
  });
}

/** Cards whose content is wider than the card. */
async function overflowingCards(page: Page) {
  return page.evaluate(() =>
    Array.from(document.querySelectorAll('.card'))
      .filter((card) => card.scrollWidth > card.clientWidth + 1)
      .map((card) => `${card.getAttribute('data-testid') ?? card.className}: ${card.scrollWidth} > ${card.clientWidth}`),
  );
}

test('no page is wider than the window on a desktop or a phone', async ({ page, request }) => {
  test.setTimeout(120_000);
  await signIn(page, 'admin', '/merchants');
  const { pages, endpoint } = await everyPage(page, request);
  try {
    const failures: string[] = [];
    for (const size of WIDTHS) {
      await page.setViewportSize({ width: size.width, height: size.height });
      for (const [name, path] of pages) {
        await page.goto(path);
        await hydrated(page);
        const o = await overflow(page);
        if (o.documentWidth > o.view) {
          failures.push(`${name} at ${size.width} px: document ${o.documentWidth} px wide; ${o.culprits.join(', ')}`);
        }
        if (size.width >= 1280) {
          const cards = await overflowingCards(page);
          if (cards.length) failures.push(`${name} at ${size.width} px: content wider than its card: ${cards.join('; ')}`);
        }
        if (name === 'limits' && size.width >= 1440) {
          const box = page.locator('.table-scroll', { has: page.getByTestId('rules') });
          const [scroll, client] = await box.evaluate((el) => [el.scrollWidth, el.clientWidth]);
          if (scroll > client) failures.push(`the Limits table is ${scroll} px in a ${client} px box at ${size.width} px`);
        }
        if (size.name !== 'desktop-1280') {
          await page.screenshot({ path: `artifacts/pages/${name}-${size.name}.png`, fullPage: true });
        }
      }
    }
    expect(failures).toEqual([]);
  } finally {
    await endpoint.stop();
  }
});
