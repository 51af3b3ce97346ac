// The step inspector end to end: a real `medusa serve` on the default model with zero-residual
// Medusa heads (each head repeats the model's next token, so repeated words are accepted), a real
// SQLite history kept across a server restart, and headless Chromium. Screenshots go to
// test-artifacts/ui/.

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { artifacts, chatControl, followScheme, openPage, openTab, startBrowser, startServer } from './harness.mjs';

/** CPU generation is slow and the machine may be busy: generous limits, never timing asserts. */

let server;
let browser;
let page;

before(async () => {
  server = await startServer();
  browser = await startBrowser();
  page = await openPage(browser, server.url, { ready: false, viewport: { width: 1280, height: 900 } });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** The inspector alone, then the page at the smallest layout the UI supports, light and dark. */
async function shoot(name) {
  const inspector = page.getByTestId('step-inspector');
  const size = page.viewportSize();
  for (const scheme of ['light', 'dark']) {
    await followScheme(page, scheme);
    await inspector.screenshot({ path: join(artifacts, `${name}-${scheme}.png`) });
  }
  await followScheme(page, 'light');
  await page.setViewportSize({ width: 800, height: 600 });
  await inspector.scrollIntoViewIfNeeded();
  // Let the resized page settle (charts follow their width on the next frame).
  await page.waitForTimeout(500);
  await page.screenshot({ path: join(artifacts, `${name}-800x600.png`) });
  await page.setViewportSize(size);
}

/** Chats sample at the model's defaults; greedy answers are what the zero heads guess right. */
async function greedy() {
  await page.getByTestId('chat-sampling-toggle').click();
  const button = page.getByTestId('view-chat').getByTestId('sampling-greedy');
  if (await button.isEnabled()) await button.click();
  await page.getByTestId('chat-sampling-toggle').click();
}

test('a tinted token opens its step’s drafted tree; the arrow keys move between steps', async () => {
  await openTab(page, 'chat');
  await greedy();
  await (await chatControl(page, 'chat-mode')).selectOption('medusa');
  await (await chatControl(page, 'chat-tree')).selectOption('mc_sim_7b_63');
  const input = page.getByTestId('chat-input');
  // Repeated words are what heads that repeat the model's next token guess right.
  await input.fill('Write the word "yes" twenty times, separated by spaces, and nothing else.');
  await input.press('Enter');
  await page.getByTestId('chat-stats').last().waitFor();
  const answer = page.locator('[data-testid="chat-message"][data-role="assistant"]').last();
  // Answers show as markdown until the tinted view is asked for.
  assert.equal(await answer.getByTestId('drafted-token').count(), 0);
  await (await chatControl(page, 'chat-show-drafted')).check();

  // A token that is only a line break draws no box to click: take one with visible text.
  const drafted = answer.getByTestId('drafted-token').filter({ hasText: /\S/ });
  assert.ok((await drafted.count()) > 0, 'the answer has tinted drafted tokens');
  await drafted.first().click();
  const inspector = answer.getByTestId('step-inspector');
  await inspector.waitFor();
  const nodes = inspector.getByTestId('step-tree-node');
  assert.ok((await nodes.count()) > 10, `${await nodes.count()} nodes drawn`);
  assert.equal(await inspector.locator('[data-testid="step-tree-node"][data-kind="root"]').count(), 1);
  assert.equal(await inspector.locator('[data-testid="step-tree-node"][data-kind="model"]').count(), 1);
  // The step of a tinted token accepted at least one guess.
  const accepted = inspector.locator('[data-testid="step-tree-node"][data-kind="draft"][data-accepted="true"]');
  assert.ok((await accepted.count()) >= 1, 'an accepted drafted node');
  assert.match(await inspector.getByTestId('step-tree-caption').innerText(), /the model (chose|added)/i);
  await inspector.getByTestId('accepted-histogram').waitFor();
  await inspector.getByTestId('head-rank-acceptance').waitFor();

  const title = inspector.getByTestId('step-inspector-title');
  const first = await title.innerText();
  assert.match(first, /^Step \d+ of \d+ · drafted \d+ · accepted \d+$/);
  const last = await inspector.getByTestId('step-inspector-next').isDisabled();
  await page.keyboard.press(last ? 'ArrowLeft' : 'ArrowRight');
  await page.waitForFunction(
    (before) => document.querySelector('[data-testid="step-inspector-title"]')?.textContent?.trim() !== before,
    first,
  );
  const moved = await title.innerText();
  const number = (t) => Number(/^Step (\d+)/.exec(t)[1]);
  assert.equal(number(moved), number(first) + (last ? -1 : 1));

  // Arrow keys typed into the message box stay there.
  await input.fill('abc');
  await input.press('ArrowLeft');
  assert.equal(await title.innerText(), moved);
  await input.fill('');

  // Fit shows the whole tree in its box; the zoom steps; folding rejected branches leaves out
  // exactly the guesses it counts on their rejected parents.
  const box = inspector.getByTestId('step-tree');
  await inspector.getByTestId('step-tree-fit').click();
  const overflow = await box.evaluate((el) => [el.scrollWidth - el.clientWidth, el.scrollHeight - el.clientHeight]);
  assert.ok(overflow.every((px) => px <= 1), `the fitted tree overflows by ${overflow}`);
  const zoomed = await inspector.getByTestId('step-tree-zoom').innerText();
  await inspector.getByTestId('step-tree-zoom-in').click();
  assert.notEqual(await inspector.getByTestId('step-tree-zoom').innerText(), zoomed);
  const unfolded = await nodes.count();
  await inspector.getByTestId('step-tree-fold').check();
  const counted = (await inspector.getByTestId('step-tree-folded').allTextContents()).map((t) => Number(t.slice(1)));
  assert.equal((await nodes.count()) + counted.reduce((a, b) => a + b, 0), unfolded);
  await inspector.getByTestId('step-tree-fold').uncheck();
  assert.equal(await nodes.count(), unfolded);

  await shoot('inspector-chat');

  // Esc closes it from inside.
  await inspector.focus();
  await page.keyboard.press('Escape');
  await inspector.waitFor({ state: 'detached' });
});

test('a stored run’s step tree is drawn after the server restarts', async () => {
  const list = await (await fetch(`${server.url}/api/runs?limit=10`)).json();
  const run = list.runs.find((r) => r.mode === 'medusa');
  assert.ok(run, 'the chat run was stored');
  assert.ok(run.decode_tokens_per_second > 0, 'the run keeps its decode speed');

  await server.restart();
  await page.goto(server.url);
  await openTab(page, 'history');
  const stored = await (await fetch(`${server.url}/api/runs/${run.id}`)).json();
  const first = stored.steps[0];
  assert.equal(first.tree.nodes.length, first.tree_size, 'the stored step keeps its tree');

  await page.locator(`[data-testid="history-row"][data-run-id="${run.id}"]`).click();
  const detail = page.getByTestId('history-detail');
  await detail.waitFor();
  assert.match(await detail.innerText(), /after the first token/);
  await detail.getByTestId('history-step-row').first().click();
  const inspector = detail.getByTestId('step-inspector');
  await inspector.waitFor();
  assert.match(await inspector.getByTestId('step-inspector-title').innerText(), new RegExp(`^Step 1 of ${stored.steps.length} `));
  const nodes = inspector.getByTestId('step-tree-node');
  assert.equal(await nodes.count(), first.tree.nodes.length + 2, 'every drafted node, the root and the model token');
  assert.ok((await nodes.count()) > 10);
  await inspector.getByTestId('accepted-histogram').waitFor();
  await inspector.getByTestId('head-rank-acceptance').waitFor();
  // The next step from its button, then back with the keyboard.
  await inspector.getByTestId('step-inspector-next').click();
  assert.match(await inspector.getByTestId('step-inspector-title').innerText(), /^Step 2 of /);
  await page.keyboard.press('ArrowLeft');
  await page.waitForFunction(() =>
    /^Step 1 of /.test(document.querySelector('[data-testid="step-inspector-title"]')?.textContent?.trim() ?? ''),
  );
  await shoot('inspector-history');
});

test('an auto step says what the draft budget weighed', async () => {
  const response = await fetch(`${server.url}/api/generate`, {
    method: 'POST',
    headers: { ...server.headers, 'Content-Type': 'application/json' },
    body: JSON.stringify({
      messages: [{ role: 'user', content: 'Repeat this list three times: red, green, blue, yellow, purple.' }],
      mode: 'auto',
      max_tokens: 32,
      temperature: 0,
    }),
  });
  const stream = await response.text();
  assert.match(stream, /"type":"finished"/);
  const id = Number(/"run_id":(\d+)/.exec(stream)[1]);
  const stored = await (await fetch(`${server.url}/api/runs/${id}`, { headers: server.headers })).json();
  const weighed = stored.steps.findIndex((s) => s.decision);
  assert.ok(weighed >= 0, 'an auto run keeps the budget’s figures');
  const decision = stored.steps[weighed].decision;
  assert.ok(decision.plain_ms > 0 && decision.evidence.length > 0, JSON.stringify(decision));

  await openTab(page, 'history');
  await page.getByTestId('history-refresh').click();
  await page.locator(`[data-testid="history-row"][data-run-id="${id}"]`).click();
  const detail = page.getByTestId('history-detail');
  await detail.getByTestId('history-step-row').nth(weighed).click();
  const text = await detail.getByTestId('step-inspector-decision').innerText();
  assert.match(text, /^(Drafted: expected|Decoded plainly)/);
  assert.match(text, /prompt lookup \((a match of [0-9+-]+ tokens|remembered after [^)]+)\): .*planned at \d+%/);
});

test('a click on a compared run’s chart opens that step’s tree', async () => {
  await openTab(page, 'compare');
  await page.getByTestId('compare-input').fill('Say "yes yes yes yes".');
  await page.getByTestId('compare-lookup').uncheck();
  await page.getByTestId('compare-tree').selectOption('mc_sim_7b_63');
  await page.getByTestId('compare-max-tokens').fill('16');
  await page.getByTestId('compare-run').click();
  const panel = page.locator('[data-testid="compare-panel"][data-mode="medusa"][data-state="done"]');
  await panel.waitFor();
  const over = panel.locator('[data-testid="compare-chart"] .u-over');
  // The mouse reaches only what is on screen, wherever the form above leaves the panels.
  await over.scrollIntoViewIfNeeded();
  const box = await over.boundingBox();
  // The middle of the chart: a step whatever their number.
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
  const inspector = panel.getByTestId('step-inspector');
  await inspector.waitFor();
  assert.match(await inspector.getByTestId('step-inspector-title').innerText(), /^Step \d+ of \d+ · drafted \d+/);
  assert.ok((await inspector.getByTestId('step-tree-node').count()) >= 2, 'the root and the model token at least');
  await inspector.getByTestId('step-inspector-close').click();
  await inspector.waitFor({ state: 'detached' });
});

test('run details say why a run drafted nothing', async () => {
  await openTab(page, 'chat');
  const fresh = page.getByTestId('chat-new');
  if (await fresh.isEnabled()) await fresh.click();
  await (await chatControl(page, 'chat-mode')).selectOption('medusa');
  await (await chatControl(page, 'chat-tree')).selectOption('auto');
  const input = page.getByTestId('chat-input');
  await input.fill('Say hello.');
  await input.press('Enter');
  await page.getByTestId('chat-stats').last().waitFor();
  const list = await (await fetch(`${server.url}/api/runs?limit=1`)).json();
  const { run, steps } = await (await fetch(`${server.url}/api/runs/${list.runs[0].id}`)).json();
  const skipped = steps.filter((s) => s.skip !== null);

  await openTab(page, 'history');
  await page.locator(`[data-testid="history-row"][data-run-id="${run.id}"]`).click();
  // The clicked run's detail, not the one open before it.
  const detail = page.locator(`[data-testid="history-detail"][data-run-id="${run.id}"]`);
  await detail.waitFor();
  // Auto drafting here usually finds that no draft pays; when it drafted at every step, there is
  // nothing to explain.
  if (skipped.length === 0) {
    assert.equal(await detail.getByTestId('history-skips').count(), 0);
  } else {
    // One line per reason: how many steps, and the first such step's message.
    const reasons = new Map();
    for (const { skip } of skipped) {
      const group = reasons.get(skip.reason) ?? { count: 0, message: skip.message };
      group.count += 1;
      reasons.set(skip.reason, group);
    }
    const text = await detail.getByTestId('history-skips').innerText();
    for (const { count, message } of reasons.values()) {
      const line = `Drafted nothing at ${count} of ${steps.length} step${steps.length === 1 ? '' : 's'}: ${message}`;
      assert.ok(text.includes(line), `${line}\nnot in\n${text}`);
    }
  }
});

test('auto mode merges lookup’s and the heads’ guesses in one tree, and Chat starts in it', async () => {
  // A fresh page with no conversation to reopen (one would take up its own mode): Chat starts at auto.
  await page.evaluate(() => localStorage.removeItem('medusa.chat.conversation'));
  await page.goto(server.url);
  await openTab(page, 'chat');
  await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
  const mode = (await chatControl(page, 'chat-mode'));
  assert.equal(await mode.inputValue(), 'auto');
  assert.equal((await mode.locator('option[value="auto"]').innerText()).trim(), 'Auto (lookup + Medusa, where each pays)');
  const fresh = page.getByTestId('chat-new');
  if (await fresh.isEnabled()) await fresh.click();
  await greedy();
  await page.getByTestId('chat-sampling-toggle').click();
  await page.getByTestId('view-chat').getByLabel('Max tokens', { exact: true }).fill('64');
  await page.getByTestId('chat-sampling-toggle').click();
  // A named tree is drafted in full beside lookup's guesses; lookup's length is not offered.
  await (await chatControl(page, 'chat-tree')).selectOption('mc_sim_7b_63');
  assert.match(await (await chatControl(page, 'chat-tree')).getAttribute('title'), /beside lookup's guesses/);
  assert.equal(await (await chatControl(page, 'chat-draft-length')).count(), 0);

  const input = page.getByTestId('chat-input');
  // The answer copies most of the prompt: what prompt lookup guesses right.
  await input.fill(
    'Fix the typos in this paragraph and write it out in full: The sun rose slowley over the quiet vilage. ' +
      'Farmers walked to thier fields while the children ran to school.',
  );
  await input.press('Enter');
  await page.getByTestId('chat-stats').last().waitFor();
  const answer = page.locator('[data-testid="chat-message"][data-role="assistant"]').last();
  await (await chatControl(page, 'chat-show-drafted')).check();
  const fromLookup = answer.locator('[data-testid="drafted-token"][data-source="lookup"]').filter({ hasText: /\S/ });
  assert.ok((await fromLookup.count()) > 0, 'tokens accepted from prompt lookup');
  await fromLookup.first().click();
  const inspector = answer.getByTestId('step-inspector');
  await inspector.waitFor();

  // The step's tree holds lookup's guesses and the heads' whole tree, and its legend names both.
  const drafts = (attrs) => inspector.locator(`[data-testid="step-tree-node"][data-kind="draft"]${attrs}`);
  const lookupNodes = drafts('[data-source="lookup"]');
  const headNodes = drafts('[data-source^="medusa_head_"]');
  assert.ok((await lookupNodes.count()) >= 1, 'nodes proposed by lookup');
  assert.ok((await headNodes.count()) >= 10, `${await headNodes.count()} nodes proposed by heads`);
  assert.match(await lookupNodes.first().locator('title').textContent(), /prompt lookup, match \d+/);
  assert.match(await headNodes.first().locator('title').textContent(), /Medusa head \d+, rank \d+/);
  const legend = inspector.getByTestId('step-tree-sources');
  const sources = await legend
    .getByTestId('step-tree-source')
    .evaluateAll((els) => els.map((e) => e.dataset.source));
  assert.equal(sources[0], 'model');
  assert.ok(sources.includes('lookup'), `legend: ${sources}`);
  assert.ok(sources.some((s) => /^medusa_head_\d+$/.test(s)), `legend: ${sources}`);
  await shoot('inspector-auto');

  // A token both drafters guessed (a head's guess equal to lookup's) names both in its hover and
  // puts `both` in the legend; a step without one has no `both`.
  const prev = inspector.getByTestId('step-inspector-prev');
  while (await prev.isEnabled()) await prev.click();
  const next = inspector.getByTestId('step-inspector-next');
  let sharedSeen = 0;
  for (;;) {
    const shared = drafts('[data-also]');
    const labels = await legend.getByTestId('step-tree-source').evaluateAll((els) => els.map((e) => e.dataset.source));
    if ((await shared.count()) > 0) {
      sharedSeen += 1;
      assert.match(await shared.first().locator('title').textContent(), /; also (Medusa head \d+|prompt lookup)/);
      assert.ok(labels.includes('both'), `legend: ${labels}`);
      if (sharedSeen === 1) await shoot('inspector-auto-shared');
    } else {
      assert.ok(!labels.includes('both'), `legend: ${labels}`);
    }
    if (!(await next.isEnabled())) break;
    await next.click();
  }
  // Greedy answers repeat: this one copies words the first head also guesses (e.g. " quiet").
  assert.ok(sharedSeen >= 1, 'a step with a token both drafters proposed');

  // The run is recorded as auto mode.
  const list = await (await fetch(`${server.url}/api/runs?limit=1`)).json();
  const run = list.runs[0];
  assert.equal(run.mode, 'auto');
  await openTab(page, 'history');
  await page.getByTestId('history-filter-mode').selectOption('auto');
  const row = page.locator(`[data-testid="history-row"][data-run-id="${run.id}"]`);
  await row.waitFor();
  assert.equal((await row.locator('.mode').innerText()).trim(), 'auto');
});

test('a stored Medusa run’s figures read the same everywhere History shows them', async () => {
  const response = await fetch(`${server.url}/api/generate`, {
    method: 'POST',
    headers: { ...server.headers, 'Content-Type': 'application/json' },
    body: JSON.stringify({
      messages: [{ role: 'user', content: 'Repeat this list three times: red, green, blue, yellow, purple.' }],
      mode: 'medusa',
      tree: 'mc_sim_7b_63',
      max_tokens: 40,
      temperature: 0,
    }),
  });
  const stream = await response.text();
  assert.match(stream, /"type":"finished"/);
  const id = Number(/"run_id":(\d+)/.exec(stream)[1]);
  const { run, steps } = await (await fetch(`${server.url}/api/runs/${id}`, { headers: server.headers })).json();
  assert.ok(steps.length > 1, 'a Medusa run records its steps');

  // The figures, counted here from the stored steps.
  const sum = (f) => steps.reduce((t, s) => t + f(s), 0);
  const n = steps.length;
  const tokens = sum((s) => s.accepted_len);
  const perStep = (tokens / n).toFixed(2);
  const drafted = sum((s) => s.tree_size);
  const depth = sum((s) => s.tree_depth);
  const accepted = tokens - n;
  // The stored summary counts the same steps (reading the prompt is none).
  assert.equal(run.steps, n);
  assert.equal(run.mean_accepted.toFixed(2), perStep);
  assert.equal(run.draft_tokens, depth);
  assert.equal(run.accepted_draft_tokens, accepted);

  // Every mode listed (an earlier test keeps the history to auto runs).
  await openTab(page, 'history');
  await page.getByTestId('history-filter-mode').selectOption('');
  await page.locator(`[data-testid="history-row"][data-run-id="${id}"]`).click();
  const detail = page.locator(`[data-testid="history-detail"][data-run-id="${id}"]`);
  await detail.waitFor();

  // Steps and tokens per step: the detail, the replay at its end and the inspector agree.
  assert.equal(await detail.getByTestId('history-tokens-per-step').innerText(), `${perStep} over ${n} steps`);
  await detail.locator('input.scrub').evaluate((el, max) => {
    el.value = String(max);
    el.dispatchEvent(new Event('input', { bubbles: true }));
  }, n);
  const replayed = detail.getByTestId('history-replay-figures');
  await page.waitForFunction(
    ([runId, want]) =>
      document.querySelector(`[data-testid="history-detail"][data-run-id="${runId}"] [data-testid="history-replay-figures"]`)?.textContent?.includes(want),
    [id, `step ${n}/${n}`],
  );
  const figures = await replayed.innerText();
  // The first token comes from reading the prompt, before the first step, and an end token
  // accepted in the last step is not written: the replay at its end counts what the detail's
  // "out" counts.
  const written = run.tokens_generated;
  const endedInAStep = run.stop_reason === 'end_of_generation';
  assert.equal(written, endedInAStep ? tokens : tokens + 1, `${run.stop_reason}: ${tokens} accepted in steps`);
  assert.match(await detail.innerText(), new RegExp(`· ${written} out`));
  assert.ok(figures.includes(`${written} tokens`), figures);
  assert.ok(figures.includes(`${perStep} tokens/step`), figures);
  assert.ok(figures.includes(`${accepted} of ${drafted} drafted accepted`), figures);
  await detail.getByTestId('history-step-row').first().click();
  const inspector = detail.getByTestId('step-inspector');
  assert.match(await inspector.getByTestId('step-inspector-title').innerText(), new RegExp(`^Step 1 of ${n} `));

  // Drafted (whole trees) and draft depth: two names, the same accepted count.
  assert.equal(
    await detail.getByTestId('history-drafted').innerText(),
    `${drafted} tokens (${(drafted / n).toFixed(1)} per step), ${accepted} accepted`,
  );
  assert.equal(await detail.getByTestId('history-draft-depth').innerText(), `${depth}, ${accepted} accepted`);
  assert.match(await detail.getByTestId('history-draft-depth').getAttribute('title'), new RegExp(`the trees held ${drafted} tokens at these ${depth} depths`));
  assert.equal(await detail.getByTestId('history-draft-tokens').count(), 0, 'no second "drafted" for a local run');

  // Steps kept per head (bars) against accepted of tried (the inspector's table): each from the
  // steps, each under its own name, and each bar's hover gives the table's figure for its head.
  const bars = detail.getByTestId('acceptance-bar');
  const deepest = Math.max(...steps.map((s) => s.depth_hits.length));
  assert.equal(await bars.count(), deepest);
  for (let d = 0; d < deepest; d++) {
    const reached = steps.filter((s) => s.depth_hits.length > d);
    const kept = reached.filter((s) => s.depth_hits[d]).length;
    const bar = bars.nth(d);
    assert.equal(await bar.locator('.value').innerText(), String(Math.round((kept / reached.length) * 100)));
    const title = await bar.getAttribute('title');
    assert.ok(title.startsWith(`head ${d + 1}: steps kept, ${kept} of ${reached.length} steps`), title);
    // The head's guesses the model judged (under an accepted parent or the root) and kept.
    let tried = 0;
    let took = 0;
    for (const s of steps) {
      s.tree.nodes.forEach((node) => {
        if (node.source !== `medusa_head_${d}`) return;
        if (node.parent === null || s.tree.nodes[node.parent].accepted) {
          tried += 1;
          took += node.accepted ? 1 : 0;
        }
      });
    }
    const cell = inspector.locator(`[data-testid="head-rank-all"][data-source="medusa_head_${d}"]`);
    if (tried === 0) continue;
    assert.ok(title.includes(`Accepted of tried (the step inspector's table) counts guesses`), title);
    assert.ok(title.includes(`: ${took} of ${tried} (`), title);
    assert.equal(await cell.innerText(), String(Math.round((took / tried) * 100)));
    assert.ok((await cell.getAttribute('title')).includes(`${took} of ${tried} tried accepted`));
  }
});
