import { expect, type Locator, type Page } from '@playwright/test';

/** The Overview page: health of the dependencies and a live freshness clock. */
export class OverviewPage {
  readonly heading: Locator;
  readonly freshness: Locator;
  readonly database: Locator;
  readonly quotaStore: Locator;

  constructor(readonly page: Page) {
    this.heading = page.getByRole('heading', { level: 1, name: 'Overview' });
    this.freshness = page.getByTestId('freshness');
    this.database = page.getByTestId('health-database');
    this.quotaStore = page.getByTestId('health-redis');
  }

  async open() {
    await this.page.goto('/');
    await expect(this.heading).toBeVisible();
  }

  /** Resolves once the wasm client has hydrated the server-rendered page. */
  async waitForHydration() {
    await expect(this.page.locator('.frame[data-hydrated="true"]')).toHaveCount(1);
  }

  /** One of the "where to look" cards: open-breakers, failed-deliveries, penalties, refusals, live-buckets, waits. */
  attention(card: 'open-breakers' | 'failed-deliveries' | 'penalties' | 'refusals' | 'live-buckets' | 'waits'): Locator {
    return this.page.getByTestId(card);
  }

  async secondsSinceUpdate(): Promise<number> {
    const text = (await this.freshness.textContent()) ?? '';
    const m = text.match(/updated (\d+) s ago/);
    if (!m) throw new Error(`unexpected freshness text: ${text}`);
    return Number(m[1]);
  }
}
