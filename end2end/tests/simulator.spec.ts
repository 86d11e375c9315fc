import { expect, test } from '../fixtures';
import { signIn } from '../pages/login';
import { SimulatorPage } from '../pages/simulator';

test('the simulator reproduces the four-workers case: 4 workers x 3 local send 12 into a window of 3', async ({ page }) => {
  await signIn(page, 'viewer', '/simulator');
  const sim = new SimulatorPage(page);
  await sim.open();
  await sim.fill({ upstream_tokens: '3', window: '10s', workers: '4', local_tokens: '3', queue: '12', pause: '0s' });
  await sim.mode('local');
  await sim.run();
  await expect(sim.value('busiest')).toHaveText('12');
  await expect(sim.value('sent')).toHaveText('12');
  await expect(sim.value('over')).toHaveText('9');
  await expect(sim.value('drain')).toHaveText('0 s');
  await expect(page.getByTestId('sim-worker-table').locator('tbody tr')).toHaveCount(4);
  await expect(page.getByTestId('sim-chart').locator('svg')).toHaveCount(1);
  await page.screenshot({ path: 'artifacts/simulator.png', fullPage: true });

  // One shared limiter: 3 per window, nothing over the limit, drained at 30 s.
  await sim.mode('shared');
  await sim.run();
  await expect(sim.value('busiest')).toHaveText('3');
  await expect(sim.value('over')).toHaveText('0');
  await expect(sim.value('drain')).toHaveText('30 s');

  // Bad input: the message sits next to the field.
  await sim.fill({ workers: '0' });
  await sim.run();
  await expect(page.getByTestId('sim-error-workers')).toContainText('from 1 to 1000');
  await expect(page.getByTestId('sim-workers')).toHaveValue('0');
});
