// Screenshots one section of a tlsrum HTML report in headless Chromium: from
// the <h2> with the given id down to the element before the next <h2>.
// `make docs-charts` uses it for docs/timeseries.png (the "Over time" section).
//
//   node scripts/report-chart.mjs REPORT.html OUT.png [SECTION_ID]   (default: over-time)
//
// playwright-core comes from tests/html's node_modules (`npm ci` there, which
// scripts/install-deps.sh does); Chromium from $CHROMIUM or /usr/bin/chromium.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const require = createRequire(new URL('../tests/html/package.json', import.meta.url));
const { chromium } = require('playwright-core');

const [report, out, section = 'over-time'] = process.argv.slice(2);
if (!report || !out) {
  console.error('usage: node scripts/report-chart.mjs REPORT.html OUT.png [SECTION_ID]');
  process.exit(2);
}
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 900 }, deviceScaleFactor: 1 });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(pathToFileURL(report).href, { waitUntil: 'load' });
  const clip = await page.evaluate((id) => {
    const head = document.getElementById(id);
    if (!head) return null;
    let top = Infinity, left = Infinity, bottom = -Infinity, right = -Infinity;
    for (let el = head; el && (el === head || el.tagName !== 'H2'); el = el.nextElementSibling) {
      const b = el.getBoundingClientRect();
      top = Math.min(top, b.top + window.scrollY);
      left = Math.min(left, b.left + window.scrollX);
      bottom = Math.max(bottom, b.bottom + window.scrollY);
      right = Math.max(right, b.right + window.scrollX);
    }
    const pad = 8;
    return { x: Math.max(0, left - pad), y: Math.max(0, top - pad),
             width: right - left + 2 * pad, height: bottom - top + 2 * pad };
  }, section);
  if (!clip) throw new Error(`${report}: no element with id "${section}"`);
  if (errors.length) throw new Error(`console errors: ${errors.join('; ')}`);
  await page.screenshot({ path: out, clip, fullPage: true });
  console.log(`${out}: section #${section}, ${Math.round(clip.width)}x${Math.round(clip.height)} px`);
} finally {
  await browser.close();
}
