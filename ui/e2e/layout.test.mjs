// Layout at the smallest window the UI supports (800x600, the desktop app's smallest) and a common
// laptop one (1280x800), against a real `medusa serve` on the default model: Compare's mode row
// wraps between modes (each with its picker, its label on one line) without scrolling sideways,
// History's runs table shows its last column whole, the chat's toolbar holds one row (at 1920x1080
// too) with the speculative controls folded in it, and opened they leave the chat most of a small
// window's height, with scroll bars taking their room. Screenshots go to test-artifacts/ui/.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { chatControl, openPage, openTab, screenshots, startBrowser, startServer } from './harness.mjs';

const SIZES = [
  [800, 600],
  [1280, 800],
];
/**
 * The most height the chat's toolbars (the row, and the speculative controls opened under it) may
 * take at 800x600, and the most the whole page above the messages may: header, tabs and
 * toolbars together.
 */
const CHAT_TOOLBARS_MAX = 80;
const ABOVE_MESSAGES_MAX = 170;

let server;
let browser;
let page;

before(async () => {
  server = await startServer();
  // Runs whose prompts and figures are long, so that History's columns are at their widest.
  const long = 'Describe, in one long and careful sentence, why speculative decoding never changes what the model writes. '.repeat(3);
  for (const [content, mode] of [
    [long, 'normal'],
    ['Name a colour.', 'lookup'],
    [long, 'auto'],
  ]) {
    const response = await fetch(`${server.url}/api/generate`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content }], mode, max_tokens: 6, sampling: { temperature: 0 } }),
    });
    assert.match(await response.text(), /"type":"finished"/);
  }
  // Enough more, imported as copies, that the table scrolls down (its scroll bar takes width too).
  const exported = await (await fetch(`${server.url}/api/runs/export?format=json`)).json();
  const copies = Array.from({ length: 24 }, (_, i) => {
    const entry = structuredClone(exported.runs[i % exported.runs.length]);
    entry.run.uid = crypto.randomUUID();
    entry.run.id = 1000 + i;
    return entry;
  });
  const imported = await fetch(`${server.url}/api/runs/import`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...exported, runs: copies, comparisons: [] }),
  });
  const report = await imported.json();
  assert.equal(report.imported, copies.length, JSON.stringify(report).slice(0, 400));
  // Scroll bars shown, as on most desktops: they take width from what must fit.
  browser = await startBrowser({ scrollbars: true });
  page = await openPage(browser, server.url, { viewport: { width: 800, height: 600 } });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

for (const [width, height] of SIZES) {
  test(`Compare's mode row at ${width}x${height} wraps between modes, never inside one, and fits`, async () => {
    await page.setViewportSize({ width, height });
    await openTab(page, 'compare');
    // Every mode that can be ticked is, so that every picker shows.
    for (const id of ['compare-medusa', 'compare-lookup', 'compare-auto']) await page.getByTestId(id).check();
    await page.getByTestId('compare-auto-tree').waitFor();
    const row = await page.getByTestId('compare-modes').evaluate((fieldset) => {
      const problems = [];
      const card = fieldset.closest('.card');
      if (card.scrollWidth > card.clientWidth) problems.push(`the form scrolls sideways: ${card.scrollWidth} > ${card.clientWidth}`);
      const box = fieldset.getBoundingClientRect();
      for (const choice of fieldset.querySelectorAll('.choice')) {
        const label = choice.querySelector('label');
        const text = label.textContent.trim().replace(/\s+/g, ' ');
        const r = choice.getBoundingClientRect();
        if (r.right > box.right + 1) problems.push(`${text} sticks out: ${r.right} > ${box.right}`);
        // One line of text: no taller than its line height and a half.
        const lineHeight = parseFloat(getComputedStyle(label).lineHeight);
        if (label.getBoundingClientRect().height > lineHeight * 1.5) problems.push(`${text} wraps inside its label`);
        // Its picker sits on the same line as its checkbox, not on a line alone.
        const check = label.querySelector('input').getBoundingClientRect();
        for (const picker of choice.querySelectorAll('select')) {
          const p = picker.getBoundingClientRect();
          if (p.top > check.bottom || p.bottom < check.top) problems.push(`${picker.dataset.testid} is on a line apart from ${text}`);
        }
      }
      return problems;
    });
    assert.deepEqual(row, []);
    await screenshots(page, `layout-${width}-compare-modes`);
    await page.getByTestId('compare-auto').uncheck();
  });

  test(`History's runs table at ${width}x${height} shows its last column whole`, async () => {
    await page.setViewportSize({ width, height });
    await openTab(page, 'history');
    await page.getByTestId('history-row').nth(2).waitFor();
    const fit = await page.getByTestId('history-table').evaluate((table) => {
      const wrap = table.parentElement;
      const last = [...table.querySelectorAll('thead th')].at(-1).getBoundingClientRect();
      const right = wrap.getBoundingClientRect().right;
      return { overflow: wrap.scrollWidth - wrap.clientWidth, lastHeaderPastEdge: Math.max(0, Math.round(last.right - right)) };
    });
    assert.deepEqual(fit, { overflow: 0, lastHeaderPastEdge: 0 });
    await screenshots(page, `layout-${width}-history`);
  });
}

/** How many rows the chat toolbar's visible controls take. */
async function toolbarRows() {
  return page.evaluate(() => {
    const toolbar = document.querySelector('[data-testid="chat-conversations-toggle"]').parentElement;
    const centres = [...toolbar.children]
      .filter((child) => child.getClientRects().length > 0)
      .map((child) => {
        const r = child.getBoundingClientRect();
        return r.top + r.height / 2;
      })
      .sort((a, b) => a - b);
    // A new row starts where a control's middle is lower than the one before by more than 12 px.
    return centres.filter((c, i) => i === 0 || c - centres[i - 1] > 12).length;
  });
}

for (const [width, height] of [
  [800, 600],
  [1920, 1080],
]) {
  test(`the chat's toolbar holds one row at ${width}x${height}, the speculative controls folded in it`, async () => {
    await page.setViewportSize({ width, height });
    await openTab(page, 'chat');
    await page.getByTestId('chat-decoding-toggle').waitFor();
    assert.equal(await page.getByTestId('chat-decoding-toggle').getAttribute('aria-expanded'), 'false');
    await screenshots(page, `layout-${width}-chat-toolbar`);
    assert.equal(await toolbarRows(), 1);
  });
}

test(`the chat's toolbars take at most ${CHAT_TOOLBARS_MAX} px of an 800x600 window, the speculative controls opened`, async () => {
  await page.setViewportSize({ width: 800, height: 600 });
  await openTab(page, 'chat');
  await (await chatControl(page, 'chat-mode')).selectOption('medusa');
  await (await chatControl(page, 'chat-tree')).waitFor();
  assert.match(await page.getByTestId('chat-decoding-toggle').innerText(), /^Medusa/);
  const heights = await page.evaluate(() => {
    const messages = document.querySelector('#view-chat [role="region"][aria-label="Messages"]').getBoundingClientRect();
    const toolbar = document.querySelector('[data-testid="chat-conversations-toggle"]').parentElement.getBoundingClientRect();
    return { toolbars: Math.round(messages.top - toolbar.top), aboveMessages: Math.round(messages.top) };
  });
  assert.ok(heights.toolbars <= CHAT_TOOLBARS_MAX, `the toolbars take ${heights.toolbars} px`);
  assert.ok(heights.aboveMessages <= ABOVE_MESSAGES_MAX, `the messages start ${heights.aboveMessages} px down`);
  // Opened, the system prompt's box takes a whole line under the controls.
  await page.getByTestId('chat-system-prompt-toggle').click();
  const box = await page.getByTestId('chat-system-prompt').evaluate((area) => {
    const toolbar = document.querySelector('[data-testid="chat-conversations-toggle"]').parentElement.getBoundingClientRect();
    const r = area.getBoundingClientRect();
    return { left: Math.round(r.left - toolbar.left), right: Math.round(toolbar.right - r.right) };
  });
  assert.deepEqual(box, { left: 0, right: 0 });
  await page.getByTestId('chat-system-prompt-toggle').click();
  await screenshots(page, 'layout-800-chat-toolbars');
  // The folded label names a draft length only where one is picked.
  await (await chatControl(page, 'chat-mode')).selectOption('lookup');
  const label = page.getByTestId('chat-decoding-toggle');
  assert.match(await label.innerText(), /^Prompt lookup [▴▾]$/);
  await (await chatControl(page, 'chat-draft-length')).selectOption('4');
  assert.match(await label.innerText(), /^Prompt lookup · 4 drafted [▴▾]$/);
  await (await chatControl(page, 'chat-draft-length')).selectOption('auto');
  await (await chatControl(page, 'chat-mode')).selectOption('auto');
  // Folded again, one row.
  await page.getByTestId('chat-decoding-toggle').click();
  assert.equal(await toolbarRows(), 1);
});
