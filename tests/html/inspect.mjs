// Loads a tlsrum HTML report in headless Chromium and prints, as JSON:
// console errors, failed requests, each chart's drawn element count, every
// data-metric value, and writes a screenshot. Usage: node inspect.mjs REPORT.html SHOT.png
import { chromium } from 'playwright-core';
import { pathToFileURL } from 'node:url';

const [report, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
const errors = [];
const requests = [];
page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
page.on('pageerror', (e) => errors.push(String(e)));
page.on('request', (r) => { if (!r.url().startsWith('file:')) requests.push(r.url()); });
await page.goto(pathToFileURL(report).href, { waitUntil: 'load' });
const result = await page.evaluate(() => {
  const charts = [...document.querySelectorAll('svg.chart')].map((svg) => {
    const box = svg.getBoundingClientRect();
    const drawn = [...svg.querySelectorAll('rect,polyline,line,path')].filter((el) => {
      const b = el.getBBox();
      return b.width > 0 || b.height > 0;
    }).length;
    return { id: svg.id, width: box.width, height: box.height, drawn };
  });
  const metrics = {};
  for (const el of document.querySelectorAll('[data-metric]')) metrics[el.dataset.metric] = el.textContent.trim();
  return { charts, metrics };
});
await page.screenshot({ path: shot, fullPage: true });
await browser.close();
console.log(JSON.stringify({ errors, requests, ...result }));
