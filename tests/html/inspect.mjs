// Loads tlsrum HTML reports in headless Chromium (one browser for all) and
// prints, one JSON line per report: console errors, failed requests, each
// chart's drawn element count and its y axis, every table's caption or
// heading, how server names fit (table cells and chart labels), every
// data-metric value; writes a screenshot unless SHOT is "-".
// Usage: node inspect.mjs REPORT.html SHOT.png [REPORT2.html SHOT2.png ...]
import { chromium } from 'playwright-core';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
if (args.length === 0 || args.length % 2) {
  console.error('usage: node inspect.mjs REPORT.html SHOT.png|- [REPORT SHOT ...]');
  process.exit(2);
}
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
// One page for all reports (a new one each costs a second on a busy machine).
const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
let errors = [];
let requests = [];
page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
page.on('pageerror', (e) => errors.push(String(e)));
page.on('request', (r) => { if (!r.url().startsWith('file:')) requests.push(r.url()); });
for (let i = 0; i < args.length; i += 2) {
  const [report, shot] = args.slice(i, i + 2);
  errors = [];
  requests = [];
  await page.goto(pathToFileURL(report).href, { waitUntil: 'load' });
  const result = await page.evaluate(() => {
    const text = (el) => [...el.childNodes]
      .filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.textContent).join('').trim();
    const charts = [...document.querySelectorAll('svg.chart')].map((svg) => {
      const box = svg.getBoundingClientRect();
      const drawn = [...svg.querySelectorAll('rect,polyline,line,path')].filter((el) => {
        const b = el.getBBox();
        return b.width > 0 || b.height > 0;
      }).length;
      const yAxis = [...svg.querySelectorAll('.y-axis')].filter((el) => el.getBBox().height > 0).length;
      const yTicks = [...svg.querySelectorAll('.y-tick')].map(text).filter((t) => t !== '');
      // Category labels (server names): the text shown, the whole one, and
      // whether the label lies inside the chart's drawing (not clipped).
      const vb = svg.viewBox.baseVal;
      const labels = [...svg.querySelectorAll('text[data-full]')].map((el) => {
        const b = el.getBBox();
        return {
          full: el.dataset.full,
          shown: text(el),
          title: el.querySelector('title')?.textContent ?? null,
          inside: b.x >= vb.x && b.x + b.width <= vb.x + vb.width,
        };
      });
      return { id: svg.id, width: box.width, height: box.height, drawn, yAxis, yTicks, labels };
    });
    // What names a table: its caption, or the heading right before it (or
    // before the scrolling box it sits in).
    const tables = [...document.querySelectorAll('table')].map((t) => {
      const outer = t.parentElement.classList.contains('scroll') && t.parentElement.children.length === 1
        ? t.parentElement : t;
      const prev = outer.previousElementSibling;
      return {
        id: t.id,
        caption: t.caption ? t.caption.textContent.trim() : null,
        heading: prev && /^H[1-6]$/.test(prev.tagName) ? prev.textContent.trim() : null,
        headerCells: t.querySelectorAll('thead th').length,
      };
    });
    const names = [...document.querySelectorAll('th.name')].map((el) => ({
      text: el.textContent.trim(),
      title: el.title,
      scrollWidth: el.scrollWidth,
      clientWidth: el.clientWidth,
    }));
    const metrics = {};
    for (const el of document.querySelectorAll('[data-metric]')) metrics[el.dataset.metric] = el.textContent.trim();
    return { charts, tables, names, metrics };
  });
  if (shot !== '-') await page.screenshot({ path: shot, fullPage: true });
  console.log(JSON.stringify({ report, errors, requests, ...result }));
}
await browser.close();
