// One-off: the README's screenshot of Compare (normal against auto) on the default model and heads.
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const root = join(import.meta.dirname, '..');
const dir = mkdtempSync(join(tmpdir(), 'shot-'));
const server = spawn(join(root, 'target/release/medusa'), ['serve', '--port', '0', '--db', join(dir, 'h.sqlite'), '--ui', join(root, 'ui/dist')], { stdio: ['ignore', 'pipe', 'inherit'] });
const url = await new Promise((resolve) => {
  let seen = '';
  server.stdout.on('data', (c) => {
    seen += c;
    const m = /listening on (http:\/\/\S+)/.exec(seen);
    if (m) resolve(m[1]);
  });
});
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
page.setDefaultTimeout(600_000);
await page.goto(url);
await page.locator('[data-testid="status"][data-status="ready"]').waitFor();
await page.getByTestId('tab-compare').click();
await page.getByTestId('compare-input').fill('List the days of the week, one per line, then the months of the year.');
for (const box of await page.locator('[data-testid="view-compare"] input[type=checkbox]').all()) {
  const label = (await box.evaluate((el) => el.closest('label')?.textContent ?? '')).trim();
  if (/^Medusa|^Prompt lookup/.test(label) && (await box.isChecked())) await box.uncheck();
  if (/^Auto/.test(label) && !(await box.isChecked())) await box.check();
}
await page.getByTestId('compare-max-tokens').fill('64');
await page.getByTestId('compare-repeats').fill('3');
await page.getByTestId('compare-run').click();
await page.getByTestId('compare-stored').waitFor();
await page.waitForTimeout(500);
await page.screenshot({ path: process.argv[2] });
await browser.close();
server.kill('SIGTERM');
