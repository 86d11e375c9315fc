import { expect, type Locator, type Page } from '@playwright/test';

/** The Limits page: rules, the rule form, the tester, history. */
export class LimitsPage {
  constructor(readonly page: Page) {}

  async open(query = '') {
    await this.page.goto(`/limits${query}`);
    await expect(this.page.getByRole('heading', { level: 1, name: 'Limits' })).toBeVisible();
    await expect(this.page.locator('[data-hydrated="true"]')).toHaveCount(1);
  }

  rows(): Locator {
    return this.page.getByTestId('rule-row');
  }

  row(text: string): Locator {
    return this.rows().filter({ hasText: text });
  }

  form(): Locator {
    return this.page.getByTestId('rule-form');
  }

  field(name: string): Locator {
    return this.form().getByTestId(`field-${name}`);
  }

  fieldError(name: string): Locator {
    return this.form().getByTestId(`error-${name}`);
  }

  async fill(values: Record<string, string>) {
    for (const [name, value] of Object.entries(values)) {
      const field = this.field(name);
      if ((await field.evaluate((el) => el.tagName)) === 'SELECT') {
        await field.selectOption(value);
      } else {
        await field.fill(value);
      }
    }
  }

  async submit() {
    await this.form().getByRole('button', { name: /Create rule|Save changes/ }).click();
  }

  saved(): Locator {
    return this.form().getByTestId('saved');
  }

  async test(scope: string, method: string, path: string): Promise<Locator> {
    const tester = this.page.getByTestId('tester');
    await tester.getByTestId('test-scope').fill(scope);
    await tester.getByTestId('test-method').fill(method);
    await tester.getByTestId('test-path').fill(path);
    await tester.getByRole('button', { name: 'Find the rule' }).click();
    return tester.getByTestId('test-result');
  }
}
