import { expect, type Locator, type Page } from '@playwright/test';

/** The audit log: filters in the URL, newest first. */
export class AuditLogPage {
  constructor(readonly page: Page) {}

  async open(filters: { actor?: string; action?: string; target?: string } = {}) {
    const query = new URLSearchParams(Object.entries(filters).filter(([, v]) => v) as [string, string][]);
    await this.page.goto(`/audit${query.size ? `?${query}` : ''}`);
    await expect(this.page.getByRole('heading', { level: 1, name: 'Audit log' })).toBeVisible();
  }

  rows(): Locator {
    return this.page.getByTestId('audit-row');
  }
}
