// Heads training end to end: a real `medusa serve` on the default model without heads (Medusa
// mode unavailable) and headless Chromium. The Training view trains heads for a copy of the model
// in a models folder of its own, following the job live (progress, loss, accuracy and tree
// charts), shows its report, and loads the model with the new heads, which makes Medusa mode
// available; a second job is cancelled while it collects answers and resumed from them.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, linkSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { after, before, test } from 'node:test';
import { medusa, openPage, openTab, screenshots, startBrowser, startServer } from './harness.mjs';

/** CPU training and tuning are slow and the machine may be busy: generous limits, never timing asserts. */
const JOB = 600_000;

let server;
let browser;
let page;
let modelsDir;
let model;

before(async () => {
  const fetched = execFileSync(medusa, ['fetch-model'], { encoding: 'utf8' }).trim();
  // The heads are written beside the model trained for: a folder of this test's own, where a
  // hard link (or a copy) stands in for the cached model.
  modelsDir = mkdtempSync(join(tmpdir(), 'medusa-e2e-models-'));
  model = join(modelsDir, basename(fetched));
  try {
    linkSync(fetched, model);
  } catch {
    copyFileSync(fetched, model);
  }
  server = await startServer({ heads: false, extraArgs: ['--models-dir', modelsDir] });
  browser = await startBrowser();
  page = await openPage(browser, server.url, { viewport: { width: 1280, height: 900 } });
});

after(async () => {
  await browser?.close();
  await server?.stop();
  if (modelsDir) rmSync(modelsDir, { recursive: true, force: true });
});

/** `text` matched literally in a regular expression. */
const escaped = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

const medusaOption = () => page.getByTestId('chat-mode').locator('option[value="medusa"]');

/**
 * Records what the job panel shows after every change of the page (no reloads): the status, the
 * progress text and the points each chart draws, to look back on once the job ended.
 */
async function recordPanel() {
  await page.evaluate(() => {
    const seen = [];
    const look = () => {
      const panel = document.querySelector('[data-testid="training-job"]');
      if (!panel) return;
      const points = (id) => Number(panel.querySelector(`[data-testid="${id}"]`)?.getAttribute('data-points') ?? -1);
      const last = seen[seen.length - 1];
      const now = {
        id: panel.getAttribute('data-job-id'),
        status: panel.getAttribute('data-status'),
        progress: panel.querySelector('[data-testid="training-progress"]')?.textContent?.trim() ?? '',
        loss: points('training-loss-chart'),
        top1: points('training-top1-chart'),
        tree: points('training-tree-chart'),
      };
      if (!last || Object.keys(now).some((k) => now[k] !== last[k])) seen.push(now);
    };
    const observer = new MutationObserver(look);
    observer.observe(document.getElementById('view-training'), { subtree: true, childList: true, characterData: true, attributes: true });
    window.__trainingSeen = seen;
  });
}

const panelHistory = () => page.evaluate(() => window.__trainingSeen);

/** Sets the form's number fields; an empty string leaves one to the backend's default. */
async function fillForm({ samples, maxTokens, epochs, tunePrompts }) {
  const option = page.getByTestId('training-model').locator(`option[value="${model}"]`);
  await option.waitFor({ state: 'attached' });
  await page.getByTestId('training-model').selectOption(model);
  await page.getByTestId('training-prompts').fill('');
  await page.getByTestId('training-samples').fill(String(samples));
  await page.getByTestId('training-max-tokens').fill(String(maxTokens));
  await page.getByTestId('training-epochs').fill(String(epochs));
  await page.getByTestId('training-tune-prompts').fill(String(tunePrompts));
}

test('trains heads live, reports them, and loads the model with them', async () => {
  await openTab(page, 'chat');
  assert.equal(await medusaOption().isDisabled(), true, 'no heads at first');

  await openTab(page, 'training');
  assert.equal((await page.getByTestId('training-jobs').innerText()).trim(), 'No training jobs yet.');
  // The loaded model is offered first, and preselected.
  const loaded = await page.evaluate(async () => (await (await fetch('/api/info')).json()).model.path);
  assert.equal(await page.getByTestId('training-model').inputValue(), loaded);

  // Too few prompts to hold one in 10 out: the form itself refuses, and nothing starts.
  await fillForm({ samples: 6, maxTokens: 16, epochs: 2, tunePrompts: 2 });
  await page.getByTestId('training-start').click();
  assert.equal(
    await page.getByTestId('training-samples').evaluate((input) => input.validity.rangeUnderflow),
    true,
  );
  assert.equal((await page.getByTestId('training-jobs').innerText()).trim(), 'No training jobs yet.');

  // A refusal shows the backend's message: a prompt file outside the models folders.
  await fillForm({ samples: 12, maxTokens: 16, epochs: 2, tunePrompts: 2 });
  await page.getByTestId('training-prompts').fill('/etc/hostname');
  await page.getByTestId('training-start').click();
  const refused = page.getByTestId('training-error');
  await refused.waitFor();
  assert.match(await refused.innerText(), /^path_not_allowed: \/etc\/hostname is not a file in the models directory/);
  assert.equal(await page.getByTestId('training-job').count(), 0, 'no job started');

  await page.getByTestId('training-prompts').fill('');
  // The form says which file the heads will be, before anything starts.
  const headsPath = join(modelsDir, basename(model).replace(/\.gguf$/, '.medusa.gguf'));
  await page.getByTestId('training-heads-path').filter({ hasText: headsPath }).waitFor();
  assert.equal((await page.getByTestId('training-heads-path').innerText()).trim(), `Heads go to ${headsPath}`);
  await recordPanel();
  await page.getByTestId('training-start').click();
  const panel = page.getByTestId('training-job');
  await panel.waitFor();
  assert.equal(await refused.count(), 0, 'the error is gone');
  const id = await panel.getAttribute('data-job-id');
  const row = page.getByTestId(`training-job-${id}`);
  await row.waitFor();
  // The job is named after its heads file, which it shows from the start.
  assert.match(await row.innerText(), new RegExp(`^${escaped(basename(headsPath))}`));
  assert.match(await page.getByTestId('training-job-name').innerText(), new RegExp(`^${escaped(basename(headsPath))} job ${id}$`));
  assert.equal((await page.getByTestId('training-heads').innerText()).trim(), `Heads will be written to ${headsPath}`);
  assert.equal(await page.getByTestId('training-start').isDisabled(), true, 'one job at a time');

  // Collection shows, then the job runs to its end.
  await page.waitForFunction(() =>
    /^Collecting answers: \d+ of 12 \([\d,]+ tokens\)/.test(document.querySelector('[data-testid="training-progress"]')?.textContent ?? ''),
  );
  await page.locator(`[data-testid="training-job"][data-job-id="${id}"][data-status="finished"]`).waitFor({ timeout: JOB });

  const seen = (await panelHistory()).filter((s) => s.id === id);
  const running = seen.filter((s) => s.status === 'running');
  assert.ok(running.some((s) => /^Collecting answers: \d+ of 12 \([\d,]+ tokens\)/.test(s.progress)), 'collection was shown');
  assert.ok(running.some((s) => /^Training: epoch \d of 2, step \d+ of \d+/.test(s.progress)), 'training was shown');
  assert.ok(running.some((s) => /^Tuning: [0-2] of 2 prompts/.test(s.progress)), 'tuning was shown');
  // The charts grew from the live events: no points at first, some while the job ran.
  assert.equal(seen[0].loss, 0, `the loss chart starts empty: ${JSON.stringify(seen[0])}`);
  assert.ok(running.some((s) => s.loss > 0), `the loss chart grew while the job ran: ${JSON.stringify(running.map((s) => s.loss))}`);
  const lossPoints = running.map((s) => s.loss);
  assert.deepEqual(lossPoints, [...lossPoints].sort((a, b) => a - b), 'points are only added');

  assert.equal((await page.getByTestId('training-status').innerText()).trim(), 'Finished');
  assert.match(await page.getByTestId('training-progress').innerText(), /^Done: 12 answers \([\d,]+ tokens\), 2 epochs, \d+ steps, 2 of 2 prompts tuned on$/);
  for (const chart of ['training-loss-chart', 'training-top1-chart', 'training-tree-chart']) {
    const points = Number(await page.getByTestId(chart).getAttribute('data-points'));
    assert.ok(points > 0, `${chart} has points: ${points}`);
  }
  const times = await page.getByTestId('training-phase-times').innerText();
  for (const phase of ['Loading the model', 'Collecting answers', 'Training', 'Tuning']) assert.match(times, new RegExp(phase));
  assert.match(await row.innerText(), /finished/);
  assert.equal(await page.getByTestId('training-cancel').count(), 0);
  assert.equal(await page.getByTestId('training-resume').count(), 0);

  const report = page.getByTestId('training-report');
  await report.waitFor();
  assert.equal(await report.getByTestId('training-report-head').count(), 4);
  for (const cell of await report.locator('[data-testid="training-report-head"] td.numeric').allInnerTexts()) {
    assert.match(cell.trim(), /^(\d+\.\d%|–)$/);
  }
  assert.match(await report.getByTestId('training-report-tree').innerText(), /^\d+ nodes, \d+\.\d\d tokens per step expected$/);
  assert.match(await report.getByTestId('training-report-tune').innerText(), /\S/);
  assert.match(await report.innerText(), new RegExp(escaped(headsPath)));
  assert.equal((await page.getByTestId('training-heads').innerText()).trim(), `Heads written to ${headsPath}`);
  assert.ok(existsSync(headsPath), 'the heads are written beside the model');
  await screenshots(page, 'training', { fullPage: true });
  // The smallest supported window: nothing scrolls sideways, the charts included.
  await page.setViewportSize({ width: 800, height: 600 });
  try {
    await page.waitForFunction(() => {
      const main = document.querySelector('main');
      return document.documentElement.scrollWidth <= innerWidth && main.scrollWidth <= main.clientWidth;
    }, undefined, { timeout: 60_000 });
  } finally {
    await page.setViewportSize({ width: 1280, height: 900 });
  }

  await page.getByTestId('training-load').click();
  await page.getByTestId('training-load-status').filter({ hasText: 'In use' }).waitFor();
  await openTab(page, 'chat');
  await page.waitForFunction(() => document.querySelector('[data-testid="chat-mode"] option[value="medusa"]')?.disabled === false);
  const info = await page.evaluate(async () => (await fetch('/api/info')).json());
  assert.equal(info.heads_path, headsPath);
  assert.equal(info.model.path, model);
  assert.ok(info.modes.includes('medusa'));
});

test('a job cancelled while it collects answers resumes from them', async () => {
  await openTab(page, 'training');
  await fillForm({ samples: 40, maxTokens: 64, epochs: 1, tunePrompts: 1 });
  // The first job's heads are on disk: this one's go beside them, under a name of its own.
  const firstHeads = basename(model).replace(/\.gguf$/, '.medusa.gguf');
  const secondHeads = join(modelsDir, basename(model).replace(/\.gguf$/, '-2.medusa.gguf'));
  await page.getByTestId('training-heads-path').filter({ hasText: secondHeads }).waitFor();
  await page.getByTestId('training-start').click();
  const panel = page.locator('[data-testid="training-job"][data-status="running"]');
  await panel.waitFor();
  const id = await panel.getAttribute('data-job-id');
  assert.equal((await page.getByTestId('training-heads').innerText()).trim(), `Heads will be written to ${secondHeads}`);
  const names = (await page.getByTestId('training-jobs').locator('.name').allInnerTexts()).map((n) => n.trim());
  assert.deepEqual(names, [basename(secondHeads), firstHeads], 'two jobs for one model are told apart');
  const progress = page.getByTestId('training-progress');
  const answered = async () => Number(/(\d+) of 40/.exec(await progress.innerText())?.[1] ?? -1);

  // Some answers in, and far from all of them.
  await page.waitForFunction(() => /^Collecting answers: [1-9]\d* of 40/.test(document.querySelector('[data-testid="training-progress"]')?.textContent ?? ''));
  await page.getByTestId('training-cancel').click();
  const cancelled = page.locator(`[data-testid="training-job"][data-job-id="${id}"][data-status="cancelled"]`);
  await cancelled.waitFor();
  assert.equal((await page.getByTestId('training-status').innerText()).trim(), 'Cancelled while collecting answers');
  assert.match(await progress.innerText(), /^Answers collected: \d+ of 40 \([\d,]+ tokens\)$/);
  const kept = await answered();
  assert.ok(kept >= 1 && kept < 40, `answers kept: ${kept}`);
  assert.match(await page.getByTestId(`training-job-${id}`).innerText(), /cancelled/);
  assert.equal(await page.getByTestId('training-cancel').count(), 0);

  await page.getByTestId('training-resume').click();
  await page.locator(`[data-testid="training-job"][data-job-id="${id}"][data-status="running"]`).waitFor();
  assert.equal(await page.getByTestId('training-delete').count(), 0, 'a running job cannot be deleted');
  assert.ok((await answered()) >= kept, `resumed from ${kept} answers: ${await progress.innerText()}`);
  await page.waitForFunction(
    (from) => {
      const match = /^Collecting answers: (\d+) of 40/.exec(document.querySelector('[data-testid="training-progress"]')?.textContent ?? '');
      return match !== null && Number(match[1]) >= from;
    },
    kept,
  );

  // Stopped again, to end quickly: what it collected is still there.
  await page.getByTestId('training-cancel').click();
  await cancelled.waitFor();
  assert.ok((await answered()) >= kept, `still ${kept} answers or more: ${await progress.innerText()}`);
  const jobs = await page.evaluate(async () => (await fetch('/api/training')).json());
  assert.deepEqual(
    jobs.map((j) => j.status),
    ['cancelled', 'finished'],
  );

  // Deleted after a question: the job leaves the list, and its answers the disk.
  // Collection did not end: its answers so far are kept beside the data file.
  const data = jobs[0].data_path.replace(/\.data$/, '.partial');
  assert.ok(existsSync(data), data);
  page.once('dialog', (dialog) => {
    assert.match(dialog.message(), new RegExp(`^Delete training job ${id} \\(.+\\) and the answers it collected\\?$`));
    void dialog.accept();
  });
  await page.getByTestId('training-delete').click();
  await page.getByTestId('training-deleted').waitFor();
  assert.match(await page.getByTestId('training-deleted').innerText(), new RegExp(`^Deleted job ${id}, freeing \\d+ (kB|MB) of collected answers\\.$`));
  assert.equal(await page.getByTestId(`training-job-${id}`).count(), 0);
  assert.ok(!existsSync(data), 'the collected answers are removed');
  const left = await page.evaluate(async () => (await fetch('/api/training')).json());
  assert.deepEqual(left.map((j) => j.status), ['finished']);
});

test('a server that stopped answering is named in the error, not "Failed to fetch"', async () => {
  await openTab(page, 'training');
  await fillForm({ samples: 12, maxTokens: 16, epochs: 1, tunePrompts: 1 });
  await server.stop();
  await page.getByTestId('training-start').click();
  const error = page.getByTestId('training-error');
  await error.waitFor();
  const origin = new URL(server.url).origin;
  assert.equal(
    (await error.innerText()).trim(),
    `network: the playground's server is not answering at ${origin}; is \`medusa serve\` still running?`,
  );
});
