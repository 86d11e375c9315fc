/**
 * A client for Sluice's worker API (shared quotas, the upstream breaker,
 * webhook events) and a retry helper that follows the Rust executor's policy
 * (docs/retry.md). Uses the global `fetch` (Node 18+, browsers, Deno, Bun).
 *
 *     const sluice = new Sluice(SLUICE_URL, TOKEN);
 *     const target = { account: "seller-42", scope: "vtex_pricing", method: "PUT", path: "/api/pricing/prices/42" };
 *     const res = await sluice.call(target, () => fetch(UPSTREAM + target.path, { method: "PUT", body }));
 */

/** Which upstream call is meant; resolves to one limit rule on the server. */
export interface Target {
  scope: string;
  path: string;
  method?: string;
  account?: string;
  /**
   * The call's lane (server default `normal`). `low` takes a permit only when
   * one is free now, never a token bucket's last (send bulk syncs as low);
   * `high` may book one slot beyond what `normal` may.
   */
  priority?: "high" | "normal" | "low";
}

export interface FieldError {
  field: string;
  message: string;
}

/** The API answered an error: `code` is stable; a 422 names each invalid field. */
export class SluiceError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly fields: FieldError[] = [],
  ) {
    super(`${status} ${code}: ${message}`);
    this.name = "SluiceError";
  }
}

/** No permit: `wait_ceiling_exceeded`, `concurrency_limit`, `store_unavailable` or `breaker_open`. */
export class Refused extends Error {
  constructor(
    readonly reason: string,
    readonly retryAfterMs: number | null,
  ) {
    super(`permit refused: ${reason}${retryAfterMs === null ? "" : `, retry in ${retryAfterMs} ms`}`);
    this.name = "Refused";
  }
}

export interface Permit {
  /** How long the client (or the server, with `hold`) waited for the booked slot. */
  waitedMs: number;
  leaseId: string | null;
  shadow: boolean;
  /** The wait ceiling of this request: 429 pauses are capped by it. */
  waitCeilingMs: number | null;
  /** The upstream breaker is half-open and this call is its probe: report its outcome. */
  probe: boolean;
}

export interface Penalty {
  blockedMs: number | null;
  observed: boolean;
}

/** `closed` (call), `probe` (call; it is the half-open probe) or `open` (do not call). */
export interface Admission {
  state: "closed" | "probe" | "open";
  retryAfterMs: number | null;
}

/** Why a call produced no response, or that it was not made. */
export type CallError = "connect" | "timeout" | "network" | "not_sent";

export interface EventReceipt {
  eventId: string;
  deliveryIds: string[];
  duplicate: boolean;
}

/** One event's result in {@link Sluice.sendEvents}: `event` when stored (201) or already stored (200), `error` when refused (422). */
export interface BatchResult {
  status: number;
  event: EventReceipt | null;
  error: SluiceError | null;
}

/** An event as {@link Sluice.sendEvent} and {@link Sluice.sendEvents} take it. */
export interface EventInput {
  merchantId: string;
  eventType: string;
  payload: object;
  idempotencyKey: string;
  status?: string;
}

function eventBody(event: EventInput): object {
  return {
    merchant_id: event.merchantId,
    event_type: event.eventType,
    payload: event.payload,
    idempotency_key: event.idempotencyKey,
    ...(event.status === undefined ? {} : { status: event.status }),
  };
}

function receipt(out: any): EventReceipt {
  return { eventId: out.event_id, deliveryIds: out.delivery_ids, duplicate: out.duplicate };
}


/** Backoff shapes (docs/retry.md, "Retry profiles"). */
export type Jitter = "additive" | "none" | "full" | "equal" | "decorrelated";

/**
 * A retry policy: the scope's retry profile as the server serves it
 * (`GET /api/v1/retry-profiles/{scope}`), or one of the caller's own.
 * Fields left out take the default policy's values.
 */
export interface RetryPolicy {
  maxAttempts: number;
  baseDelayMs: number;
  totalBudgetMs: number;
  /** Overrides the rule's wait ceiling when set. */
  waitCeilingMs?: number;
  /** The longest single pause; none: no cap. */
  maxDelayMs?: number | null;
  /** Default `additive`: base·2^(n−1) + U[0, base). */
  jitter?: Jitter;
  /** Retried outcomes: `"429"`, `"503"` …, `"5xx"`, `"network"`. Default 429, 5xx, network. */
  retryOn?: string[];
  /** On a 429: `honour` (default), `cap` or `ignore` the penalty's Retry-After. */
  retryAfter?: "honour" | "cap" | "ignore";
}

/** The Rust executor's defaults: 3 attempts, 500 ms base, 180 s budget. */
export const DEFAULT_POLICY: RetryPolicy = { maxAttempts: 3, baseDelayMs: 500, totalBudgetMs: 180_000 };

const DAY_MS = 86_400_000;
const DEFAULT_RETRY_ON = ["429", "5xx", "network"];

/** Whether `policy` retries an answer with `status` (`null`: a network failure). */
export function retries(policy: RetryPolicy, status: number | null): boolean {
  const on = policy.retryOn ?? DEFAULT_RETRY_ON;
  if (status === null) return on.includes("network");
  return on.includes(String(status)) || (status >= 500 && status <= 599 && on.includes("5xx"));
}

/**
 * The backoff after failed attempt `attempt` (1-based) for the uniform draw
 * `u` in [0, 1), with `e = base × 2^(attempt−1)` and `c = min(cap, e)`:
 * additive `min(cap, e + u·base)`, none `c`, full `u·c`, equal `c·(0.5 + u/2)`,
 * decorrelated `min(cap, base + u·(3·previous − base))`.
 */
export function shapedBackoffMs(policy: RetryPolicy, attempt: number, u: number, previousMs: number | null = null): number {
  const base = policy.baseDelayMs;
  const cap = policy.maxDelayMs ?? DAY_MS;
  const unit = Math.min(Math.max(u, 0), 1 - Number.EPSILON);
  const e = Math.min(base * 2 ** Math.min(attempt - 1, 40), DAY_MS);
  const c = Math.min(cap, e);
  let pause: number;
  switch (policy.jitter ?? "additive") {
    case "none":
      pause = c;
      break;
    case "full":
      pause = unit * c;
      break;
    case "equal":
      pause = c * (0.5 + unit / 2);
      break;
    case "decorrelated": {
      const previous = Math.min(Math.max(previousMs ?? base, base), cap);
      pause = base + unit * (3 * previous - base);
      break;
    }
    default:
      pause = e + unit * base;
  }
  return Math.min(pause, cap, DAY_MS);
}

/** The policy a profile's JSON (`policy` of the retry-profiles endpoint) describes. */
export function policyFromProfile(p: any): RetryPolicy {
  return {
    maxAttempts: p.max_attempts,
    baseDelayMs: p.base_delay_ms,
    totalBudgetMs: p.total_budget_ms,
    ...(p.wait_ceiling_ms === null || p.wait_ceiling_ms === undefined ? {} : { waitCeilingMs: p.wait_ceiling_ms }),
    maxDelayMs: p.max_delay_ms ?? null,
    jitter: p.jitter,
    retryOn: p.retry_on,
    retryAfter: p.retry_after,
  };
}

/** How long a fetched retry profile is used before it is fetched again. */
const PROFILE_TTL_MS = 5_000;

/** Why a call was given up: the Rust executor's codes. */
export type GiveUpReason =
  | "attempts_exhausted"
  | "budget_exhausted"
  | "wait_ceiling"
  | "unsafe_to_repeat"
  | "network_not_retried"
  | "store_unavailable"
  | "breaker_open"
  | "concurrency_limit"
  | "no_rule"
  | "invalid_request";

export class GaveUp extends Error {
  constructor(
    readonly reason: GiveUpReason,
    readonly attempts: number,
    /** The last response, if the last attempt got one. */
    readonly last: Response | null,
    /** The last network error, if the last attempt got none. */
    readonly error: unknown = null,
  ) {
    super(`gave up after ${attempts} attempt(s): ${reason}`);
    this.name = "GaveUp";
  }
}

export interface CallOptions {
  /** Retry by this policy instead of the scope's retry profile (fetched from the server). */
  policy?: RetryPolicy;
  /**
   * Report every attempt's outcome to the upstream breaker of (account,
   * scope), which the permit endpoint asks before granting (a probe's
   * outcome is always reported).
   */
  breaker?: boolean;
  /** May a request that may have reached the upstream be sent again? Default: the method is idempotent. */
  safeToRepeat?: boolean;
  /** Did this error happen before the request left (then any method is retried)? */
  isConnectError?: (error: unknown) => boolean;
}

export interface SluiceOptions {
  /** Waits out booked slots and retry pauses; tests pass a recorder. */
  sleep?: (ms: number) => Promise<void>;
  /** Jitter source in [0, 1). */
  random?: () => number;
  now?: () => number;
}

const IDEMPOTENT = new Set(["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]);
const REFUSALS: Record<string, GiveUpReason> = {
  wait_ceiling_exceeded: "wait_ceiling",
  concurrency_limit: "concurrency_limit",
  store_unavailable: "store_unavailable",
  breaker_open: "breaker_open",
};
const HEADER_FIELDS = ["retry_after", "rate_limit_remaining", "rate_limit_reset"];

function body(target: Target): Record<string, unknown> {
  const out: Record<string, unknown> = { scope: target.scope, path: target.path };
  if (target.method !== undefined) out.method = target.method;
  if (target.account !== undefined) out.account = target.account;
  if (target.priority !== undefined) out.priority = target.priority;
  return out;
}

/** `base × 2^(attempt−1) + jitter` (jitter below base), at most a day. */
export function backoffMs(policy: RetryPolicy, attempt: number, jitterMs: number): number {
  const jitter = Math.min(Math.max(jitterMs, 0), policy.baseDelayMs - 0.001);
  return Math.min(policy.baseDelayMs * 2 ** Math.min(attempt - 1, 40) + jitter, 86_400_000);
}

/**
 * The pause after failed attempt `attempt`: the backoff for a 5xx or a network
 * failure; for a 429 `min(max(blocked, backoff), ceiling)` where `blocked` is
 * the penalty the server applied (its one `Retry-After` parser, and one
 * token's refill).
 */
export function delayMs(
  policy: RetryPolicy,
  attempt: number,
  jitterMs: number,
  status: number | null,
  blockedMs: number | null,
  ruleCeilingMs: number | null,
): number {
  return pauseMs(policy, backoffMs(policy, attempt, jitterMs), status, blockedMs, ruleCeilingMs);
}

/**
 * The pause before the next attempt given its `backoff`: the backoff, or for
 * a 429 `min(max(hint, backoff), ceiling)` where `hint` is the server's
 * penalty (max(Retry-After, one refill)) as the policy's `retryAfter` says:
 * whole (`honour`), at most the cap (`cap`), or not at all (`ignore`).
 */
export function pauseMs(policy: RetryPolicy, backoff: number, status: number | null, blockedMs: number | null, ruleCeilingMs: number | null): number {
  if (status !== 429) return backoff;
  const blocked = blockedMs ?? 0;
  const mode = policy.retryAfter ?? "honour";
  const hint = mode === "ignore" ? 0 : mode === "cap" ? Math.min(blocked, policy.maxDelayMs ?? DAY_MS) : blocked;
  const wanted = Math.max(hint, backoff);
  const ceiling = policy.waitCeilingMs ?? ruleCeilingMs;
  return ceiling === null ? wanted : Math.min(wanted, ceiling);
}

function connectError(error: unknown): boolean {
  for (let e: any = error; e; e = e.cause) {
    if (e.code === "ECONNREFUSED" || e.code === "UND_ERR_CONNECT_TIMEOUT") return true;
  }
  return false;
}

function errorKind(error: unknown): CallError {
  const name = (error as { name?: string } | null)?.name ?? "";
  return name === "TimeoutError" || name === "AbortError" ? "timeout" : "network";
}

export class Sluice {
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly random: () => number;
  private readonly now: () => number;
  private readonly profiles = new Map<string, { policy: RetryPolicy; until: number }>();

  constructor(
    readonly baseUrl: string,
    private readonly token: string,
    options: SluiceOptions = {},
  ) {
    this.sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.random = options.random ?? Math.random;
    this.now = options.now ?? (() => performance.now());
  }

  private async request(method: string, path: string, payload?: unknown): Promise<{ status: number; json: any }> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.token}` };
    if (payload !== undefined) headers["content-type"] = "application/json";
    const res = await fetch(this.baseUrl.replace(/\/$/, "") + path, {
      method,
      headers,
      body: payload === undefined ? undefined : JSON.stringify(payload),
    });
    const text = await res.text();
    let json: any = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = text;
    }
    return { status: res.status, json };
  }

  private expect(res: { status: number; json: any }, ...ok: number[]): any {
    if (ok.includes(res.status)) return res.json;
    const e = typeof res.json === "object" && res.json !== null ? res.json : {};
    throw new SluiceError(res.status, e.code ?? "unknown", e.message ?? "", e.fields ?? []);
  }

  /**
   * Take a permit, waiting for the booked slot: the server books it and says
   * how long; this waits that long (or the server holds the request, `hold`).
   * Throws {@link Refused} when there is no slot within the wait ceiling.
   */
  async permit(target: Target, options: { cost?: number; maxWaitMs?: number; hold?: boolean } = {}): Promise<Permit> {
    const payload = { ...body(target), cost: options.cost ?? 1, hold: options.hold ?? false, ...(options.maxWaitMs === undefined ? {} : { max_wait_ms: options.maxWaitMs }) };
    const res = await this.request("POST", "/api/v1/permits", payload);
    if ((res.status === 429 || res.status === 503) && res.json?.granted === false) {
      throw new Refused(res.json.reason, res.json.retry_after_ms ?? null);
    }
    const out = this.expect(res, 200);
    if (out.wait_ms > 0) await this.sleep(out.wait_ms);
    return {
      waitedMs: out.wait_ms + out.held_ms,
      leaseId: out.lease_id ?? null,
      shadow: out.shadow,
      waitCeilingMs: out.wait_ceiling_ms ?? null,
      probe: out.probe ?? false,
    };
  }

  /** Give a concurrency lease back. */
  async release(leaseId: string): Promise<void> {
    this.expect(await this.request("DELETE", `/api/v1/leases/${encodeURIComponent(leaseId)}`), 204);
  }

  /**
   * Report an upstream response: a 429 with its `Retry-After`, and any
   * `X-RateLimit-Remaining` / `X-RateLimit-Reset`. The server parses the
   * headers; a value it cannot read is dropped and the rest reported again,
   * as the Rust executor ignores it. `null` when there is nothing to report.
   */
  async penalty(target: Target, status: number, headers: Headers): Promise<Penalty | null> {
    const payload = body(target);
    const retryAfter = status === 429 ? headers.get("retry-after") : null;
    const remaining = headers.get("x-ratelimit-remaining");
    if (status === 429) payload.status_429 = true;
    if (retryAfter !== null) payload.retry_after = retryAfter;
    if (remaining !== null) {
      payload.rate_limit_remaining = remaining;
      const reset = headers.get("x-ratelimit-reset");
      if (reset !== null) payload.rate_limit_reset = reset;
    }
    if (status !== 429 && remaining === null) return null;
    let res = await this.request("POST", "/api/v1/penalties", payload);
    const unreadable = res.status === 422 ? ((res.json?.fields ?? []) as FieldError[]).filter((f) => HEADER_FIELDS.includes(f.field)) : [];
    if (unreadable.length > 0) {
      for (const f of unreadable) delete payload[f.field];
      if (status !== 429 && payload.rate_limit_remaining === undefined) return null;
      res = await this.request("POST", "/api/v1/penalties", payload);
    }
    const out = this.expect(res, 200);
    return { blockedMs: out.blocked_ms ?? null, observed: out.observed };
  }

  /** Ask the upstream breaker of (account, scope) whether a call may go out. Not needed before a permit: the permit endpoint asks it too. */
  async admit(scope: string, account?: string): Promise<Admission> {
    const out = this.expect(await this.request("POST", "/api/v1/upstream-breakers/admit", { scope, ...(account === undefined ? {} : { account }) }), 200);
    return { state: out.decision, retryAfterMs: out.retry_after_ms ?? null };
  }

  /**
   * Tell the upstream breaker how a call went: its HTTP status, or an error
   * (`not_sent` for an admitted probe that was never sent). 5xx and errors
   * count as failures. Returns how the report was counted.
   */
  async report(scope: string, account: string | undefined, result: { status: number } | { error: CallError }): Promise<string> {
    const payload = { scope, ...(account === undefined ? {} : { account }), ...result };
    return this.expect(await this.request("POST", "/api/v1/upstream-breakers/report", payload), 200).counted_as;
  }

  /**
   * The retry profile the scope's calls use (its own, `*`'s, or the
   * default), as served by `GET /api/v1/retry-profiles/{scope}`; kept for a
   * few seconds, so an edit reaches workers within that time.
   */
  async retryProfile(scope: string): Promise<RetryPolicy> {
    const cached = this.profiles.get(scope);
    if (cached && cached.until > this.now()) return cached.policy;
    const out = this.expect(await this.request("GET", `/api/v1/retry-profiles/${encodeURIComponent(scope)}`), 200);
    const policy = policyFromProfile(out.policy);
    this.profiles.set(scope, { policy, until: this.now() + PROFILE_TTL_MS });
    return policy;
  }

  /** Hand an event to the webhook outbox; the same key twice stores one event. */
  async sendEvent(event: EventInput): Promise<EventReceipt> {
    return receipt(this.expect(await this.request("POST", "/api/v1/events", eventBody(event)), 200, 201));
  }

  /**
   * Hand up to 1000 events to the outbox in one call and one transaction.
   * One result per event, in order; each is stored, already stored or
   * refused on its own. Throws {@link SluiceError} when the call as a whole
   * is refused (503 while the database is unreachable: nothing was stored,
   * send the same batch again).
   */
  async sendEvents(events: EventInput[]): Promise<BatchResult[]> {
    const out = this.expect(await this.request("POST", "/api/v1/events/batch", events.map(eventBody)), 200);
    return out.results.map((r: any) => ({
      status: r.status,
      event: r.event ? receipt(r.event) : null,
      error: r.error ? new SluiceError(r.status, r.error.code, r.error.message, r.error.fields ?? []) : null,
    }));
  }

  /**
   * Send `send(attempt)` until it answers 2xx or a status the policy does not
   * retry (both returned), or a reason to give up ({@link GaveUp}): every
   * attempt takes a permit, a 429 is reported before it is waited out,
   * retried outcomes back off by the policy's jitter shape. The policy is the
   * scope's retry profile from the server unless `options.policy` is given
   * (the default policy if the server has none to serve). A failure after the
   * request may have left is retried only for idempotent methods or when
   * `safeToRepeat`.
   */
  async call(target: Target, send: (attempt: number) => Promise<Response>, options: CallOptions = {}): Promise<Response> {
    const policy = options.policy ?? (await this.profileOrDefault(target.scope));
    const method = (target.method ?? "GET").toUpperCase();
    const repeatIsSafe = options.safeToRepeat ?? IDEMPOTENT.has(method);
    const isConnectError = options.isConnectError ?? connectError;
    const deadline = this.now() + policy.totalBudgetMs;
    let last: Response | null = null;
    let error: unknown = null;
    let previousBackoff: number | null = null;
    for (let attempt = 1; attempt <= policy.maxAttempts; attempt++) {
      const sent = attempt - 1;
      // The permit endpoint asks the upstream breaker first: an open one
      // refuses (`breaker_open`), a half-open one makes this call its probe.
      let permit: Permit;
      try {
        permit = await this.permit(target, { maxWaitMs: policy.waitCeilingMs });
      } catch (e) {
        if (e instanceof Refused) throw new GaveUp(REFUSALS[e.reason] ?? "invalid_request", sent, last, error);
        if (e instanceof SluiceError) throw new GaveUp(e.code === "no_rule" ? "no_rule" : "invalid_request", sent, last, error);
        throw e;
      }
      if (this.now() >= deadline) {
        await this.releaseQuietly(permit);
        if (permit.probe) await this.feedback(() => this.report(target.scope, target.account, { error: "not_sent" }));
        throw new GaveUp("budget_exhausted", attempt, last, error);
      }
      let response: Response | null = null;
      try {
        response = await send(attempt);
      } catch (e) {
        error = e;
        last = null;
      } finally {
        await this.releaseQuietly(permit);
      }
      const status = response?.status ?? null;
      if (options.breaker || permit.probe) {
        const result = status !== null ? { status } : { error: isConnectError(error) ? ("connect" as const) : errorKind(error) };
        await this.feedback(() => this.report(target.scope, target.account, result));
      }
      if (response !== null) {
        last = response;
        error = null;
      }
      if (response !== null && status! >= 200 && status! < 300) {
        await this.feedback(() => this.penalty(target, status!, response!.headers));
        return response;
      }
      let blockedMs: number | null = null;
      if (response !== null && status === 429) {
        // Report first: every worker on this bucket must hold back, not only this call.
        blockedMs = (await this.feedback(() => this.penalty(target, 429, response!.headers)))?.blockedMs ?? null;
      }
      if (!retries(policy, status)) {
        if (response !== null) return response;
        throw new GaveUp("network_not_retried", attempt, last, error);
      }
      if (response === null && !(repeatIsSafe || isConnectError(error))) throw new GaveUp("unsafe_to_repeat", attempt, last, error);
      if (attempt === policy.maxAttempts) break;
      const backoff = shapedBackoffMs(policy, attempt, this.random(), previousBackoff);
      previousBackoff = backoff;
      const pause = pauseMs(policy, backoff, status, blockedMs, permit.waitCeilingMs);
      if (this.now() + pause >= deadline) throw new GaveUp("budget_exhausted", attempt, last, error);
      await this.sleep(pause);
    }
    throw new GaveUp("attempts_exhausted", policy.maxAttempts, last, error);
  }

  /** The scope's profile; the default policy from a server without the endpoint. */
  private async profileOrDefault(scope: string): Promise<RetryPolicy> {
    try {
      return await this.retryProfile(scope);
    } catch (e) {
      if (e instanceof SluiceError && (e.status === 404 || e.status === 422)) return DEFAULT_POLICY;
      throw e;
    }
  }

  private async releaseQuietly(permit: Permit): Promise<void> {
    if (permit.leaseId !== null) await this.feedback(() => this.release(permit.leaseId!));
  }

  /** Feedback that fails is logged and does not fail a call that has its answer. */
  private async feedback<T>(report: () => Promise<T>): Promise<T | null> {
    try {
      return await report();
    } catch (e) {
      console.warn(`sluice feedback failed: ${e}`);
      return null;
    }
  }
}
