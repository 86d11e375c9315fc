import { expect, type Locator, type Page } from '@playwright/test';

/** The Quotas page: every (account, rule) bucket, searched by account, live. */
export class QuotasPage {
  readonly heading: Locator;
  readonly freshness: Locator;
  readonly search: Locator;
  readonly count: Locator;

  constructor(readonly page: Page) {
    this.heading = page.getByRole('heading', { level: 1, name: 'Quotas' });
    this.freshness = page.getByTestId('freshness');
    this.search = page.getByRole('searchbox', { name: 'Account' });
    this.count = page.getByTestId('quota-count');
  }

  async open(account?: string) {
    await this.page.goto(account ? `/quotas?account=${encodeURIComponent(account)}` : '/quotas');
    await expect(this.heading).toBeVisible();
  }

  /** Search by typing into the box and submitting the form. */
  async searchFor(account: string) {
    await this.search.fill(account);
    await this.page.getByRole('button', { name: 'Search' }).click();
    await expect(this.page).toHaveURL(new RegExp(`account=${encodeURIComponent(account)}`));
  }

  row(account: string, rule: string): Locator {
    return this.page.locator(`tr[data-testid="bucket-row"][data-account="${account}"][data-rule="${rule}"]`);
  }

  rows(): Locator {
    return this.page.getByTestId('bucket-row');
  }

  /** A number of a bucket's row: grants, penalties, remaining, … */
  async number(account: string, rule: string, cell: 'grants' | 'penalties' | 'remaining'): Promise<number> {
    const text = (await this.row(account, rule).getByTestId(cell).textContent()) ?? '';
    return Number(text.trim());
  }

  /** Resolves once the page follows the live stream. */
  async waitUntilLive() {
    await expect(this.page.locator('.frame[data-hydrated="true"]')).toHaveCount(1);
    await expect(this.freshness).toHaveAttribute('data-state', 'live');
  }
}

/** One account's page: its buckets and the usage and penalties charts. */
export class QuotaAccountPage {
  readonly usageChart: Locator;
  readonly penaltiesChart: Locator;

  constructor(readonly page: Page) {
    this.usageChart = page.getByTestId('usage-chart');
    this.penaltiesChart = page.getByTestId('penalties-chart');
  }

  async open(account: string) {
    await this.page.goto(`/quotas/${encodeURIComponent(account)}`);
    await expect(this.page.getByRole('heading', { level: 1 })).toContainText(account);
  }
}
