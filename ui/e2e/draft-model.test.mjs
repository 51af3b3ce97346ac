// A draft model end to end: a real `medusa serve` on the default model with the model itself as
// its draft model (it agrees with itself, so its guesses are accepted), and headless Chromium:
// Settings names the draft model, the mode menus offer it, Compare runs it beside normal
// decoding with its nodes in its own colour in the step inspector, and History keeps it. Last,
// Settings says why drafting does or does not pay here, and converts the model's Q4_1 weights
// to IQ4_NL (a copy of the default model, so the conversion is written beside the copy). The
// server runs ggml's stock kernels, under which Q4_1 does not batch and the conversion is offered.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { chatControl, medusa, openPage, openTab, screenshots, startBrowser, startServer } from './harness.mjs';

/** CPU generation is slow and the machine may be busy: generous limits, never timing asserts. */

let server;
let browser;
let page;
/** The model served: a copy of the default model in a directory of its own. */
let served;

before(async () => {
  const model = execFileSync(medusa, ['fetch-model'], { encoding: 'utf8' }).trim();
  served = join(mkdtempSync(join(tmpdir(), 'medusa-weights-')), 'SmolLM2-135M-Instruct.Q4_1.gguf');
  copyFileSync(model, served);
  server = await startServer({ extraArgs: ['--model', served, '--draft-model', model, '--kernels', 'stock'] });
  browser = await startBrowser();
  page = await openPage(browser, server.url, { ready: false, viewport: { width: 1280, height: 900 } });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test('Settings names the draft model and how well it agreed with the model', async () => {
  assert.equal((await page.getByTestId('header-draft-model').innerText()).trim(), 'draft: SmolLM2-135M-Instruct');
  await openTab(page, 'settings');
  const line = page.getByTestId('settings-draft-model');
  await line.waitFor();
  assert.match(await line.innerText(), /SmolLM2-135M-Instruct · Q4_1.*agreed with the model on \d+% of its confident guesses at load; [\d.]+ ms per drafted token/s);
  assert.match(await page.getByTestId('settings-draft-model-path').inputValue(), /SmolLM2-135M-Instruct\.Q4_1\.gguf$/);
});

test('the mode menu offers the draft model, and auto names it among its drafters', async () => {
  await openTab(page, 'chat');
  const mode = (await chatControl(page, 'chat-mode'));
  const draft = mode.locator('option[value="draft"]');
  assert.equal(await draft.isDisabled(), false);
  assert.match(await draft.innerText(), /^Draft model \(.+\)$/);
  assert.equal(
    (await mode.locator('option[value="auto"]').innerText()).trim(),
    'Auto (lookup + Medusa + draft model, where each pays)',
  );
});

test('a chat answer in draft mode says why it drafted little, when it did', async () => {
  await openTab(page, 'chat');
  await (await chatControl(page, 'chat-mode')).selectOption('draft');
  const input = page.getByTestId('chat-input');
  await input.fill('Name three colours.');
  await input.press('Enter');
  const stats = page.getByTestId('chat-stats').last();
  // Finished: the summary names the run.
  const finished = stats.getByText(/run #\d+/);
  await finished.waitFor();
  const runId = /run #(\d+)/.exec(await finished.innerText())[1];
  const { steps } = await (await fetch(`${server.url}/api/runs/${runId}`, { headers: server.headers })).json();
  const undrafted = steps.filter((s) => s.tree_size === 0).length;
  const why = stats.getByTestId('undrafted');
  if (undrafted * 2 > steps.length) {
    assert.match(await why.innerText(), new RegExp(`^Drafted nothing at \\d+ of ${steps.length} steps?: .+`));
  } else {
    assert.equal(await why.count(), 0, `${undrafted} of ${steps.length} steps drafted nothing`);
  }
  await (await chatControl(page, 'chat-mode')).selectOption('auto');
  await page.getByTestId('chat-new').click();
});

test('Compare runs the draft model beside normal decoding and shows its guesses in its colour', async () => {
  await openTab(page, 'compare');
  await page.getByTestId('compare-input').fill('Count from 1 to 30, separated by commas.');
  await page.getByTestId('compare-medusa').uncheck();
  await page.getByTestId('compare-lookup').uncheck();
  await page.getByTestId('compare-draft').check();
  // A fixed length drafts at every step whatever it costs on this machine.
  await page.getByTestId('compare-draft-length').selectOption('4');
  await page.getByTestId('compare-max-tokens').fill('32');
  await page.getByTestId('compare-run').click();
  const panel = page.locator('[data-testid="compare-panel"][data-mode="draft"][data-state="done"]');
  await panel.waitFor();
  assert.match(await panel.innerText(), /Draft model/);
  await page.locator('[data-testid="compare-panel"][data-mode="normal"][data-state="done"]').waitFor();
  const same = page.locator('[data-testid="compare-identical"][data-mode="draft"]');
  await same.waitFor();
  assert.match((await same.innerText()).trim(), /^Identical output/);

  const over = panel.locator('[data-testid="compare-chart"] .u-over');
  await over.scrollIntoViewIfNeeded();
  const box = await over.boundingBox();
  await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
  const inspector = panel.getByTestId('step-inspector');
  await inspector.waitFor();
  // From the first step on, to one that drafted with the draft model.
  const prev = inspector.getByTestId('step-inspector-prev');
  while (await prev.isEnabled()) await prev.click();
  const nodes = inspector.locator('[data-testid="step-tree-node"][data-kind="draft"][data-source="draft_model"]');
  const next = inspector.getByTestId('step-inspector-next');
  while ((await nodes.count()) === 0 && (await next.isEnabled())) await next.click();
  assert.ok((await nodes.count()) > 0, 'a step with the draft model’s guesses');
  assert.match(await nodes.first().locator('title').textContent(), /draft model/);
  const sources = await inspector
    .getByTestId('step-tree-source')
    .evaluateAll((els) => els.map((e) => e.dataset.source));
  assert.ok(sources.includes('draft_model'), `legend: ${sources}`);
  const colour = await nodes.first().evaluate((el) => getComputedStyle(el.querySelector('rect, circle') ?? el).fill);
  assert.ok(colour && colour !== 'none', `the node is filled: ${colour}`);
  await screenshots(page, 'compare-draft-model', { fullPage: true });
});

test('History keeps which draft model a run drafted with', async () => {
  await openTab(page, 'history');
  // Compare's runs of the prompt, normal and draft mode: the draft mode's names its draft model.
  const runs = page.locator('[data-testid="history-row"]').filter({ hasText: 'Count from 1 to 30' });
  await runs.first().waitFor();
  const count = await runs.count();
  let found = false;
  for (let i = 0; i < count && !found; i += 1) {
    const id = await runs.nth(i).getAttribute('data-run-id');
    await runs.nth(i).click();
    // The clicked run's detail, not the one open before it.
    const detail = page.locator(`[data-testid="history-detail"][data-run-id="${id}"]`);
    await detail.waitFor();
    const draft = detail.getByTestId('history-detail-draft-model');
    if ((await draft.count()) > 0) {
      assert.match(await draft.innerText(), /^SmolLM2-135M-Instruct \(Q4_1\)$/);
      found = true;
    }
  }
  assert.ok(found, 'a run that names its draft model');
});

test("Settings counts the draft model's decodes once it has drafted", async () => {
  await page.reload();
  await openTab(page, 'settings');
  const line = page.getByTestId('draft-model-decodes');
  await line.waitFor();
  // Compare drafted with it above: decodes and their tokens are counted.
  assert.match(await line.innerText(), /^[1-9]\d* decodes?, \d+ tokens? \([\d.]+ per decode, every drafting request's in the same ones\)$/);
});

test('Settings says why drafting pays or not here, and converts the weights to IQ4_NL in one click', async () => {
  await openTab(page, 'settings');
  const outlook = page.getByTestId('settings-drafting-outlook');
  await outlook.waitFor();
  assert.match(await outlook.innerText(), /^Here a decode of 2 tokens costs [\d.]+x one, and 4 cost [\d.]+x: .+ more than \d+% of the time/s);
  const note = page.getByTestId('settings-format-note');
  assert.match(await note.innerText(), /^Q4_1 weights are not repacked for the CPU's batched kernels in llama\.cpp; IQ4_NL, .+ quantizes the weights a second time/s);
  await page.getByTestId('settings-convert').click();
  const status = page.getByTestId('settings-convert-status');
  await status.waitFor();
  const converted = served.replace(/Q4_1\.gguf$/, 'IQ4_NL.gguf');
  assert.equal(await status.innerText(), `Loaded IQ4_NL weights from ${converted}; the original file is kept.`);
  const info = await (await fetch(`${server.url}/api/info`)).json();
  assert.equal(info.model.file_type, 'IQ4_NL');
  assert.equal(info.model.path, converted);
  assert.ok(existsSync(served), 'the original is kept');
  assert.ok(info.heads !== null && info.model.draft_model !== null, 'heads and draft model come along');
  // The new file's decode costs are measured when a run first drafts with it.
  await page.getByTestId('settings-drafting-outlook-pending').waitFor();
  assert.equal(await page.getByTestId('settings-format-note').count(), 0, 'IQ4_NL is repacked: nothing left to convert');
});
