// `node shot.js URL OUT.png`: opens a page made by Catapult's trace2html in headless
// Chromium, switches the flow arrows on, and saves the timeline (docs/screenshot/trace.sh).
const puppeteer = require('puppeteer-core');

(async () => {
  const [url, out] = process.argv.slice(2);
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: 'new',
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const page = await browser.newPage();
  page.on('pageerror', (e) => console.error('page error:', e.message));
  await page.setViewport({ width: 1600, height: 560 });
  await page.goto(url, { waitUntil: 'domcontentloaded', timeout: 60000 });
  // the viewer builds its tracks after the page has loaded
  await new Promise((r) => setTimeout(r, 6000));
  const said = await page.evaluate(() => {
    // the viewer's elements live in (polyfilled) shadow roots: walk them all
    const all = [];
    const walk = (root) =>
      Array.prototype.forEach.call(root.querySelectorAll('*'), (e) => {
        all.push(e);
        if (e.shadowRoot) walk(e.shadowRoot);
      });
    walk(document);
    const button = all.find((e) => e.tagName === 'BUTTON' && e.textContent.trim() === 'Flow events');
    if (!button) return 'no "Flow events" button';
    button.click();
    const box = all.slice(all.indexOf(button)).find((e) => e.tagName === 'INPUT' && e.type === 'checkbox');
    if (!box) return 'no flow category to switch on';
    if (!box.checked) box.click();
    return box.checked ? '' : 'flow arrows still off';
  });
  if (said) throw new Error(said);
  await page.keyboard.press('Escape');
  await page.mouse.click(800, 500); // closes the menu
  await new Promise((r) => setTimeout(r, 1500));
  await page.screenshot({ path: out, clip: { x: 0, y: 0, width: 1600, height: 280 } });
  await browser.close();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
