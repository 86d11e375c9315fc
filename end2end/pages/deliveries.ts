import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect, type APIRequestContext, type Locator, type Page } from '@playwright/test';
import { apiToken } from './login';

/**
 * A merchant webhook endpoint on 127.0.0.1, answering whatever `reply`
 * says for each request (the e2e server allows loopback deliveries).
 */
/** What a mock merchant answers: a status, or a status with a text body. */
export type Answer = number | { status: number; body: string };

export class MockMerchant {
  received = 0;
  private constructor(private server: http.Server, readonly url: string, public reply: (n: number) => Answer) {}

  static async start(reply: (n: number) => Answer): Promise<MockMerchant> {
    let merchant: MockMerchant | undefined;
    const server = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const n = ++merchant!.received;
        const answer = merchant!.reply(n);
        if (typeof answer === 'number') res.writeHead(answer).end();
        else res.writeHead(answer.status, { 'content-type': 'text/plain' }).end(answer.body);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    merchant = new MockMerchant(server, `http://127.0.0.1:${port}/webhooks`, reply);
    return merchant;
  }

  async stop() {
    const closed = new Promise((resolve) => this.server.close(resolve));
    // Sluice's delivery worker keeps its connection alive and may still be
    // retrying on it (a ladder, a breaker probe): close() alone stops new
    // connections but serves that one until it idles, which a retrying worker
    // never lets happen, so the test hung past its timeout after passing.
    this.server.closeAllConnections();
    await closed;
  }
}

/** A name no other test run has used on this database. */
export function unique(prefix: string): string {
  return `${prefix} ${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
}

/** Hand an event over through the worker API; returns its delivery id. */
export async function sendEvent(request: APIRequestContext, merchantId: string, eventType: string, status = 'new'): Promise<string> {
  const resp = await request.post('/api/v1/events', {
    headers: { Authorization: `Bearer ${apiToken('worker')}` },
    data: { merchant_id: merchantId, event_type: eventType, payload: { status, order: 'o-1' }, idempotency_key: unique('e2e') },
  });
  expect(resp.status()).toBe(201);
  return (await resp.json()).delivery_ids[0];
}

/** Merchants (admin writes). */
export class MerchantsPage {
  readonly table: Locator;
  constructor(readonly page: Page) {
    this.table = page.getByTestId('merchants');
  }

  async open() {
    await this.page.goto('/merchants');
    await expect(this.page.getByRole('heading', { level: 1, name: 'Merchants' })).toBeVisible();
    await expect(this.page.locator('.frame[data-hydrated="true"]')).toHaveCount(1);
  }

  row(name: string): Locator {
    return this.table.getByTestId('merchant-row').filter({ hasText: name });
  }

  /** Add a merchant through the form; returns its id (read from the table). */
  async add(name: string, url: string): Promise<string> {
    const form = this.page.getByTestId('add-merchant');
    await form.getByLabel('Name').fill(name);
    await form.getByLabel('Webhook URL').fill(url);
    await form.getByRole('button', { name: 'Add merchant' }).click();
    await expect(this.page.getByTestId('one-time-secret')).toBeVisible();
    await expect(this.row(name)).toHaveCount(1);
    const id = await this.row(name).getAttribute('data-id');
    if (!id) throw new Error('merchant row without an id');
    return id;
  }
}

/** The deliveries list with its filter and bulk retry. */
export class DeliveriesPage {
  readonly rows: Locator;
  constructor(readonly page: Page) {
    this.rows = page.getByTestId('delivery-row');
  }

  async open(query: Record<string, string> = {}) {
    const qs = new URLSearchParams(query).toString();
    await this.page.goto(qs ? `/deliveries?${qs}` : '/deliveries');
    await expect(this.page.getByRole('heading', { level: 1, name: 'Deliveries' })).toBeVisible();
  }

  /** Reload the filtered list until it shows `n` rows (the worker runs on its own). */
  async waitForRows(query: Record<string, string>, n: number) {
    await expect.poll(async () => {
      await this.open(query);
      return this.rows.count();
    }, { timeout: 20_000 }).toBe(n);
  }
}

/** One delivery: its ladder timeline. */
export class DeliveryPage {
  readonly status: Locator;
  readonly attempts: Locator;
  readonly planned: Locator;
  /** Each attempt's answer: status, latency, body, headers. */
  readonly answers: Locator;
  constructor(readonly page: Page) {
    this.status = page.getByTestId('delivery-status');
    this.attempts = page.getByTestId('attempt');
    this.planned = page.getByTestId('planned');
    this.answers = page.getByTestId('attempt-detail');
  }

  async open(id: string) {
    await this.page.goto(`/deliveries/${id}`);
    await expect(this.page.getByRole('heading', { level: 1, name: 'Delivery' })).toBeVisible();
  }

  async waitForStatus(id: string, status: string) {
    await expect.poll(async () => {
      await this.open(id);
      return this.status.textContent();
    }, { timeout: 20_000 }).toBe(status);
  }
}

/** Merchant delivery breakers and upstream breakers. */
export class BreakersPage {
  constructor(readonly page: Page) {}

  async open() {
    await this.page.goto('/breakers');
    await expect(this.page.getByRole('heading', { level: 1, name: 'Breakers' })).toBeVisible();
  }

  merchant(merchantId: string): Locator {
    return this.page.locator(`[data-testid="merchant-breaker"][data-merchant="${merchantId}"]`);
  }

  state(merchantId: string): Locator {
    return this.merchant(merchantId).getByTestId('breaker-state');
  }

  async waitForState(merchantId: string, state: string) {
    await expect.poll(async () => {
      await this.open();
      return this.state(merchantId).textContent();
    }, { timeout: 20_000 }).toBe(state);
  }

  async reset(merchantId: string, reason: string) {
    await this.resetRow(this.merchant(merchantId), reason);
  }

  /** The upstream breaker row of (account, scope). */
  upstream(account: string, scope: string): Locator {
    return this.page.getByTestId('upstream-breaker').filter({ hasText: account }).filter({ hasText: scope });
  }

  async resetUpstream(account: string, scope: string, reason: string) {
    await this.resetRow(this.upstream(account, scope), reason);
  }

  private async resetRow(row: Locator, reason: string) {
    await expect(this.page.locator('.frame[data-hydrated="true"]')).toHaveCount(1);
    await row.getByTestId('reset-open').click();
    await row.getByTestId('reset-reason').fill(reason);
    await row.getByTestId('reset-confirm').click();
  }
}

/** Report one upstream call's outcome to the upstream breaker, as a worker in any language does. */
export async function reportUpstream(request: APIRequestContext, account: string, scope: string, status: number) {
  const resp = await request.post('/api/v1/upstream-breakers/report', {
    headers: { Authorization: `Bearer ${apiToken('worker')}` },
    data: { account, scope, status },
  });
  expect(resp.status()).toBe(200);
}
