import { expect, type Locator, type Page } from '@playwright/test';

/** The schedule simulator. */
export class SimulatorPage {
  constructor(readonly page: Page) {}

  async open() {
    await this.page.goto('/simulator');
    await expect(this.page.getByRole('heading', { level: 1, name: 'Schedule simulator' })).toBeVisible();
    await expect(this.page.locator('[data-hydrated="true"]')).toHaveCount(1);
  }

  async fill(values: Record<string, string>) {
    for (const [name, value] of Object.entries(values)) {
      await this.page.getByTestId(`sim-${name}`).fill(value);
    }
  }

  async mode(mode: 'local' | 'shared') {
    await this.page.getByTestId(`sim-mode-${mode}`).check();
  }

  async run() {
    await this.page.getByRole('button', { name: 'Simulate' }).click();
  }

  value(name: 'sent' | 'busiest' | 'over' | 'drain'): Locator {
    return this.page.getByTestId(`sim-${name}`);
  }
}
