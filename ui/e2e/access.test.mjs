// Accessibility of every view, checked by axe-core in headless Chromium against a real `medusa
// serve` on the default model (with a run in the history and a stopped training job, so their
// tables, statuses and panels are drawn):
// no serious or critical WCAG 2 A/AA violation, contrast included, in the light and dark themes,
// at the smallest supported window (800x600) and a large one (1920x1080); the chat picked in the
// list, shown, under the pointer and focused, in both themes; a stored run's detail with a step's
// tree open, whose scroll box the keyboard reaches; a skip link leads past the header to the view.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { after, before, test } from 'node:test';
import { followScheme, startBrowser, startServer, openPage } from './harness.mjs';

const VIEWS = ['chat', 'concurrent', 'compare', 'history', 'settings', 'training'];
const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

let server;
let browser;
let page;

before(async () => {
  server = await startServer();
  const response = await fetch(`${server.url}/api/generate`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Name a colour.' }], mode: 'lookup', max_tokens: 8 }),
  });
  assert.match(await response.text(), /"type":"finished"/);
  // A training job stopped before it wrote anything, so that Training draws a job's panel.
  const info = await (await fetch(`${server.url}/api/info`)).json();
  const started = await fetch(`${server.url}/api/training`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: info.model.path, samples: 12, max_tokens: 8 }),
  });
  const job = await started.json();
  assert.equal(started.status, 201, JSON.stringify(job));
  assert.equal((await fetch(`${server.url}/api/training/${job.id}/cancel`, { method: 'POST' })).status, 204);
  assert.match(await (await fetch(`${server.url}/api/training/${job.id}/events`)).text(), /"status":"cancelled"/);
  browser = await startBrowser();
  // The page's CSP refuses inline scripts: axe is injected around it, the page itself unchanged.
  page = await openPage(browser, server.openUrl, { bypassCSP: true });
  await page.addScriptTag({ content: axeSource });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** The serious and critical WCAG 2 A/AA violations on the page as shown (or in `within`, a selector), one line each. */
async function violations(within = null) {
  const found = await page.evaluate(async (within) => {
    const result = await window.axe.run(within ? document.querySelector(within) : document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa'] } });
    return result.violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .flatMap((v) => v.nodes.map((n) => `${v.id}: ${n.target.join(' ')}: ${n.failureSummary.split('\n')[1]?.trim() ?? ''}`));
  }, within);
  return found;
}

for (const [width, height] of [
  [800, 600],
  [1920, 1080],
]) {
  test(`every view at ${width}x${height}, light and dark, has no serious accessibility violation`, async () => {
    await page.setViewportSize({ width, height });
    const problems = [];
    for (const scheme of ['light', 'dark']) {
      await followScheme(page, scheme);
      for (const view of VIEWS) {
        await page.getByTestId(`tab-${view}`).click();
        await page.getByTestId(`view-${view}`).waitFor({ state: 'visible' });
        if (view === 'history') await page.getByTestId('history-row').first().waitFor();
        if (view === 'training') await page.getByTestId('training-job').waitFor();
        for (const line of await violations()) problems.push(`${scheme} ${view}: ${line}`);
      }
    }
    await followScheme(page, 'light');
    assert.deepEqual(problems, []);
  });
}

test('the chat picked in the list reads clearly in both themes, under the pointer too', async () => {
  const created = await fetch(`${server.url}/api/conversations`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ system_prompt: '' }),
  });
  assert.equal(created.status, 201);
  const conversation = await created.json();
  const answered = await fetch(`${server.url}/api/generate`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Name a fruit.' }], mode: 'normal', max_tokens: 6, conversation_id: conversation.id }),
  });
  assert.match(await answered.text(), /"type":"finished"/);
  // Wide enough that the list stays open beside the chat; read again, the list holds the new chat.
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.reload();
  await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
  await page.addScriptTag({ content: axeSource });
  await page.getByTestId('tab-chat').click();
  await page.getByTestId('view-chat').waitFor({ state: 'visible' });
  const item = page.locator(`[data-testid="conversation-item"][data-id="${conversation.id}"]`);
  await item.locator('.pick').click();
  await page.locator(`[data-testid="conversation-item"].open[data-id="${conversation.id}"]`).waitFor();
  const problems = [];
  for (const scheme of ['light', 'dark']) {
    await followScheme(page, scheme);
    for (const state of ['shown', 'under the pointer', 'focused']) {
      if (state === 'under the pointer') await item.locator('.pick').hover();
      if (state === 'focused') await item.locator('.pick').focus();
      for (const line of await violations('[data-testid="conversation-list"]')) problems.push(`${scheme}, ${state}: ${line}`);
    }
    await page.mouse.move(0, 0);
  }
  await followScheme(page, 'light');
  assert.deepEqual(problems, []);
});

test("a stored run's detail, its replay and a step's tree open, has no serious violation", async () => {
  const response = await fetch(`${server.url}/api/generate`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      messages: [{ role: 'user', content: 'Name three colours.' }],
      mode: 'medusa',
      tree: 'mc_sim_7b_63',
      max_tokens: 8,
    }),
  });
  const id = Number(/"run_id":(\d+)/.exec(await response.text())[1]);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.reload();
  await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
  await page.addScriptTag({ content: axeSource });
  await page.getByTestId('tab-history').click();
  await page.getByTestId('history-filter-mode').selectOption('');
  await page.locator(`[data-testid="history-row"][data-run-id="${id}"]`).click();
  const detail = page.locator(`[data-testid="history-detail"][data-run-id="${id}"]`);
  await detail.getByTestId('history-step-row').first().click();
  const tree = detail.getByTestId('step-tree');
  await tree.waitFor();
  // A tree wider than its box scrolls: the keyboard reaches it.
  await tree.focus();
  assert.ok(await tree.evaluate((el) => el === document.activeElement), 'the tree takes the focus');
  const problems = [];
  for (const scheme of ['light', 'dark']) {
    await followScheme(page, scheme);
    for (const line of await violations(`[data-testid="history-detail"][data-run-id="${id}"]`)) problems.push(`${scheme}: ${line}`);
  }
  await followScheme(page, 'light');
  assert.deepEqual(problems, []);
});

test('a skip link, the first stop of the keyboard, leads to the view', async () => {
  await page.reload();
  await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
  await page.keyboard.press('Tab');
  const skip = page.getByTestId('skip-link');
  assert.ok(await skip.evaluate((el) => el === document.activeElement), 'the skip link has the focus');
  assert.ok(await skip.isVisible(), 'and shows itself when focused');
  await page.keyboard.press('Enter');
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'view');
});

test('the theme follows the system until one is chosen in Settings, and stays chosen', async () => {
  const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await followScheme(page, 'light');
  const light = await background();
  await page.getByTestId('tab-settings').click();
  await page.getByTestId('settings-theme').selectOption('dark');
  await page.waitForFunction(() => document.documentElement.dataset.theme === 'dark');
  assert.notEqual(await background(), light, 'dark while the system is light');
  await page.reload();
  await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
  assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark', 'kept after a reload');
  await page.getByTestId('tab-settings').click();
  assert.equal(await page.getByTestId('settings-theme').inputValue(), 'dark');
  await page.getByTestId('settings-theme').selectOption('system');
  await page.waitForFunction(() => document.documentElement.dataset.theme === 'light');
  assert.equal(await background(), light);
});
