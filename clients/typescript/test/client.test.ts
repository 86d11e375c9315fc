// The TypeScript client against a real Sluice server (scripts/contract.sh
// starts one and passes SLUICE_URL, SLUICE_WORKER_TOKEN, SLUICE_ADMIN_TOKEN)
// and a real upstream HTTP server on loopback. Pauses go to a recorder
// instead of sleeping, so the tests check every wait the client would make.

import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { randomUUID } from "node:crypto";
import { after, test } from "node:test";

import { GaveUp, Refused, Sluice, SluiceError, delayMs, pauseMs, shapedBackoffMs, DEFAULT_POLICY, type Target } from "../src/index.js";

const URL = process.env.SLUICE_URL ?? "";
const skip = URL === "" ? "needs a running server: run scripts/contract.sh" : false;

function client(): { sluice: Sluice; pauses: number[] } {
  const pauses: number[] = [];
  const sluice = new Sluice(URL, process.env.SLUICE_WORKER_TOKEN ?? "", {
    sleep: async (ms) => {
      pauses.push(ms);
    },
  });
  return { sluice, pauses };
}

async function rule(tokens: number, intervalMs: number): Promise<string> {
  const scope = `ts_${randomUUID().replace(/-/g, "").slice(0, 12)}`;
  const res = await fetch(`${URL}/api/v1/limits`, {
    method: "POST",
    headers: { authorization: `Bearer ${process.env.SLUICE_ADMIN_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ scope, tokens, interval_ms: intervalMs }),
  });
  assert.equal(res.status, 201, await res.text());
  return scope;
}

const servers: Server[] = [];
after(() => servers.forEach((s) => s.close()));

/** A real HTTP server answering a scripted list of [status, headers]; status 0 drops the connection. */
async function upstream(...script: [number, Record<string, string>][]): Promise<{ send: (attempt: number) => Promise<Response>; requests: () => number }> {
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    const [status, headers] = script.shift() ?? [200, {}];
    if (status === 0) {
      req.socket.destroy();
      return;
    }
    res.writeHead(status, headers).end();
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return { send: () => fetch(`http://127.0.0.1:${port}/x`), requests: () => requests };
}

test("a permit waits for its booked slot, then is refused past the ceiling", { skip }, async () => {
  const { sluice, pauses } = client();
  const target: Target = { scope: await rule(1, 60_000), path: "/feed", account: "a1" };
  assert.equal((await sluice.permit(target)).waitedMs, 0);
  const second = await sluice.permit(target);
  assert.ok(second.waitedMs >= 59_000 && second.waitedMs <= 60_000, `${second.waitedMs}`);
  assert.deepEqual(pauses, [second.waitedMs]);
  assert.equal(second.waitCeilingMs, 125_000);
  await sluice.permit(target);
  await assert.rejects(sluice.permit(target), (e: unknown) => e instanceof Refused && e.reason === "wait_ceiling_exceeded" && (e.retryAfterMs ?? 0) > 125_000);
});

test("a 429 response blocks the bucket for its Retry-After; an unreadable one is dropped", { skip }, async () => {
  const { sluice } = client();
  const target: Target = { scope: await rule(100, 1000), path: "/p", method: "PUT", account: "a2" };
  const penalty = await sluice.penalty(target, 429, new Headers({ "retry-after": "30" }));
  assert.equal(penalty?.blockedMs, 30_000);
  const permit = await sluice.permit(target);
  assert.ok(permit.waitedMs >= 29_000 && permit.waitedMs <= 30_000, `${permit.waitedMs}`);
  const other: Target = { ...target, account: "a3" };
  for (const value of ["1.5", "+5", "soon"]) {
    assert.equal((await sluice.penalty(other, 429, new Headers({ "retry-after": value })))?.blockedMs, 10, value);
  }
  assert.equal(await sluice.penalty(other, 200, new Headers()), null);
  assert.equal((await sluice.penalty(other, 200, new Headers({ "x-ratelimit-remaining": "0", "x-ratelimit-reset": "20" })))?.observed, true);
});

test("low takes only a free permit and high books one slot beyond normal", { skip }, async () => {
  const { sluice, pauses } = client();
  const target: Target = { scope: await rule(1, 60_000), path: "/feed", account: "lanes" };
  assert.equal((await sluice.permit({ ...target, priority: "low" })).waitedMs, 0);
  await assert.rejects(sluice.permit({ ...target, priority: "low" }), (e: unknown) => e instanceof Refused && e.reason === "wait_ceiling_exceeded");
  // Normal books the next two minutes (its ceiling is 2 × 60 s + 5 s), high the minute after.
  await sluice.permit(target);
  await sluice.permit(target);
  await assert.rejects(sluice.permit(target), (e: unknown) => e instanceof Refused);
  const high = await sluice.permit({ ...target, priority: "high" });
  assert.ok(high.waitedMs >= 179_000 && high.waitedMs <= 180_000, `${high.waitedMs}`);
  assert.equal(pauses.length, 3);
});

test("a 422 names each invalid field", { skip }, async () => {
  const { sluice } = client();
  await assert.rejects(
    sluice.permit({ scope: "", path: "relative" }),
    (e: unknown) => e instanceof SluiceError && e.status === 422 && e.fields.map((f) => f.field).join() === "scope,path",
  );
  await assert.rejects(
    sluice.permit({ scope: "s", path: "/p", priority: "urgent" as "high" }),
    (e: unknown) => e instanceof SluiceError && e.status === 422 && e.fields.map((f) => f.field).join() === "priority",
  );
});

test("the same event key twice stores one event", { skip }, async () => {
  const { sluice } = client();
  const res = await fetch(`${URL}/api/v1/merchants`, {
    method: "POST",
    headers: { authorization: `Bearer ${process.env.SLUICE_ADMIN_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ name: "TS Shop", url: "https://merchant.example/hook" }),
  });
  assert.equal(res.status, 201);
  const merchantId = (await res.json()).merchant.id;
  const event = { merchantId, eventType: "payment.status_changed", payload: { status: "paid" }, idempotencyKey: `order-${randomUUID()}` };
  const first = await sluice.sendEvent(event);
  const again = await sluice.sendEvent(event);
  assert.deepEqual([first.duplicate, again.duplicate], [false, true]);
  assert.equal(first.eventId, again.eventId);
});

test("a batch of events gets one result per event", { skip }, async () => {
  const { sluice } = client();
  const res = await fetch(`${URL}/api/v1/merchants`, {
    method: "POST",
    headers: { authorization: `Bearer ${process.env.SLUICE_ADMIN_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ name: "TS Batch", url: "https://merchant.example/hook" }),
  });
  assert.equal(res.status, 201);
  const merchantId = (await res.json()).merchant.id;
  const event = { merchantId, eventType: "order.created", payload: { n: 1 }, idempotencyKey: `batch-${randomUUID()}` };
  const results = await sluice.sendEvents([event, event, { ...event, merchantId: "mer_unknown", idempotencyKey: `${event.idempotencyKey}-x` }]);
  assert.deepEqual(results.map((r) => r.status), [201, 200, 422]);
  assert.equal(results[1].event?.eventId, results[0].event?.eventId);
  assert.equal(results[1].event?.duplicate, true);
  assert.equal(results[2].error?.code, "unknown_merchant");
});

test("the retry helper backs off on 5xx and waits out a 429", { skip }, async () => {
  const jitters = [0.25, 0.75];
  const pauses: number[] = [];
  const sluice = new Sluice(URL, process.env.SLUICE_WORKER_TOKEN ?? "", {
    sleep: async (ms) => {
      pauses.push(ms);
    },
    random: () => jitters.shift() ?? 0,
  });
  const target: Target = { scope: await rule(100, 1000), path: "/x", method: "GET", account: "r1" };
  const server = await upstream([503, {}], [429, { "retry-after": "2" }], [200, {}]);
  const res = await sluice.call(target, server.send);
  assert.equal(res.status, 200);
  assert.equal(server.requests(), 3);
  // 503: 500 ms + 0.25 × 500. 429: the 2 s penalty beats 1 s + 0.75 × 500.
  // Then the permit waits out what is left of the penalty on the server's clock.
  assert.equal(pauses.length, 3, `${pauses}`);
  assert.equal(pauses[0], 625);
  assert.equal(pauses[1], 2000);
  assert.ok(pauses[2] >= 1500 && pauses[2] <= 2000, `${pauses}`);
});

test("the retry helper gives up with the executor's reasons", { skip }, async () => {
  const { sluice } = client();
  const scope = await rule(100, 1000);
  const target: Target = { scope, path: "/x", method: "GET", account: "r2" };
  let server = await upstream([503, {}], [503, {}], [503, {}]);
  await assert.rejects(sluice.call(target, server.send), (e: unknown) => e instanceof GaveUp && e.reason === "attempts_exhausted" && e.attempts === 3 && e.last?.status === 503);

  server = await upstream([0, {}]);
  const post = { ...target, method: "POST" };
  await assert.rejects(sluice.call(post, server.send), (e: unknown) => e instanceof GaveUp && e.reason === "unsafe_to_repeat");
  assert.equal(server.requests(), 1);

  server = await upstream([404, {}]);
  assert.equal((await sluice.call(target, server.send)).status, 404);
  assert.equal(server.requests(), 1);

  await assert.rejects(sluice.call({ scope: "nobody_has_this_scope", path: "/x" }, server.send), (e: unknown) => e instanceof GaveUp && e.reason === "no_rule");
  // The budget is checked once the permit is in hand: a clock that moved
  // past it by then gives up before sending.
  const ticks = [0, 10_000];
  const late = new Sluice(URL, process.env.SLUICE_WORKER_TOKEN ?? "", { now: () => ticks.shift() ?? 10_000 });
  await assert.rejects(
    late.call(target, server.send, { policy: { maxAttempts: 3, baseDelayMs: 1, totalBudgetMs: 1000 } }),
    (e: unknown) => e instanceof GaveUp && e.reason === "budget_exhausted",
  );
  assert.equal(server.requests(), 1);
});

test("the upstream breaker opens after five reported failures and permits are refused", { skip }, async (t) => {
  const doc = await (await fetch(`${URL}/api/openapi.json`)).json();
  if (!("/api/v1/upstream-breakers/report" in doc.paths)) {
    t.skip("this server has no upstream breaker endpoints");
    return;
  }
  const { sluice } = client();
  const scope = await rule(100, 1000);
  const target: Target = { scope, path: "/x", method: "GET", account: "b1" };
  const server = await upstream(...Array.from({ length: 6 }, (): [number, Record<string, string>] => [503, {}]));
  await assert.rejects(sluice.call(target, server.send, { breaker: true, policy: { maxAttempts: 5, baseDelayMs: 1, totalBudgetMs: 180_000 } }));
  assert.equal((await sluice.admit(scope, "b1")).state, "open");
  await assert.rejects(sluice.call(target, server.send, { breaker: true }), (e: unknown) => e instanceof GaveUp && e.reason === "breaker_open");
  assert.equal(server.requests(), 5);
});

test("429 pauses are capped by the wait ceiling", () => {
  assert.equal(delayMs(DEFAULT_POLICY, 1, 0, 429, 90_000, 65_000), 65_000);
  assert.equal(delayMs({ ...DEFAULT_POLICY, waitCeilingMs: 1000 }, 3, 0, 429, null, 65_000), 1000);
  assert.equal(delayMs(DEFAULT_POLICY, 2, 100, 503, 90_000, null), 1100);
});

async function setProfile(scope: string, profile: Record<string, unknown>): Promise<void> {
  const res = await fetch(`${URL}/api/v1/retry-profiles/${scope}`, {
    method: "PUT",
    headers: { authorization: `Bearer ${process.env.SLUICE_ADMIN_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify(profile),
  });
  assert.equal(res.status, 200, await res.text());
}

test("the retry helper retries by the scope's retry profile from the server", { skip }, async () => {
  const draws = [0.5, 0.25];
  const pauses: number[] = [];
  const sluice = new Sluice(URL, process.env.SLUICE_WORKER_TOKEN ?? "", {
    sleep: async (ms) => {
      pauses.push(ms);
    },
    random: () => draws.shift() ?? 0,
  });
  const scope = await rule(100, 1000);
  await setProfile(scope, { preset: "vtex" });
  const profile = await sluice.retryProfile(scope);
  assert.deepEqual([profile.maxAttempts, profile.jitter, profile.maxDelayMs, profile.retryOn], [6, "equal", 60_000, ["429", "503"]]);
  const target: Target = { scope, path: "/x", method: "GET", account: "p1" };
  // VTEX: a 500 is not retried; the answer comes back after one attempt.
  let server = await upstream([500, {}], [200, {}]);
  assert.equal((await sluice.call(target, server.send)).status, 500);
  assert.equal(server.requests(), 1);
  // 503 twice: min(60 s, 1 s × 2^k) × (0.5 + u/2) for k = 0, 1.
  server = await upstream([503, {}], [503, {}], [200, {}]);
  assert.equal((await sluice.call(target, server.send)).status, 200);
  assert.deepEqual(pauses, [1000 * 0.75, 2000 * 0.625]);
  // A network failure is not retried under VTEX's rules.
  server = await upstream([0, {}]);
  await assert.rejects(sluice.call(target, server.send), (e: unknown) => e instanceof GaveUp && e.reason === "network_not_retried");
});

test("a scope without a profile of its own uses the default policy", { skip }, async () => {
  const { sluice } = client();
  const policy = await sluice.retryProfile(await rule(100, 1000));
  assert.deepEqual([policy.maxAttempts, policy.baseDelayMs, policy.jitter, policy.retryOn], [3, 500, "additive", ["429", "5xx", "network"]]);
});

test("every jitter shape stays under its cap", () => {
  for (const jitter of ["additive", "none", "full", "equal", "decorrelated"] as const) {
    const policy = { ...DEFAULT_POLICY, jitter, baseDelayMs: 1000, maxDelayMs: 60_000 };
    for (let attempt = 1; attempt <= 12; attempt++) {
      for (const u of [0, 0.3, 0.999]) {
        const pause = shapedBackoffMs(policy, attempt, u, 40_000);
        assert.ok(pause >= 0 && pause <= 60_000, `${jitter} ${attempt} ${u}: ${pause}`);
      }
    }
  }
  // VTEX's worked numbers: attempt 0 is 500–1000 ms, attempt 4 8–16 s, attempt 6 capped at 30–60 s.
  const vtex = { ...DEFAULT_POLICY, jitter: "equal" as const, baseDelayMs: 1000, maxDelayMs: 60_000 };
  assert.deepEqual([shapedBackoffMs(vtex, 1, 0), shapedBackoffMs(vtex, 5, 0.5), shapedBackoffMs(vtex, 7, 0)], [500, 12_000, 30_000]);
  assert.equal(pauseMs({ ...vtex, retryAfter: "honour" }, 500, 429, 30_000, 125_000), 30_000);
  assert.equal(pauseMs({ ...vtex, retryAfter: "cap", maxDelayMs: 10_000 }, 500, 429, 30_000, 125_000), 10_000);
  assert.equal(pauseMs({ ...vtex, retryAfter: "ignore" }, 500, 429, 30_000, 125_000), 500);
});
