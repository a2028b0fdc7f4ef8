// Screenshot of a trace in the Perfetto UI, headless: node shot.cjs PAGE_URL OUT.png START_S END_S HEIGHT
// Opens PAGE_URL (index.html of tools/ui-screenshot/run.sh), expands every track group, zooms to
// [START_S, END_S] after the trace's start and saves the top HEIGHT pixels.
const puppeteer = require('puppeteer-core');

(async () => {
  const [url, out, start, end, height] = process.argv.slice(2);
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: 'new',
    args: ['--no-sandbox'],
  });
  const page = await browser.newPage();
  await page.setViewport({width: 1600, height: 1000});
  await page.goto(url, {waitUntil: 'load'});
  // The trace processor (WebAssembly) loads and the tracks are laid out.
  await page.waitForFunction(() => window.globals && Object.keys(globals.state.tracks).length > 0, {timeout: 60000});
  await new Promise(r => setTimeout(r, 3000));
  await page.evaluate((s, e) => {
    for (const id of Object.keys(globals.state.trackGroups)) {
      if (globals.state.trackGroups[id].collapsed) globals.dispatch(Actions.toggleTrackGroupCollapsed({trackGroupId: id}));
    }
    const t = globals.state.traceTime;
    const local = globals.frontendLocalState;
    const Span = Object.getPrototypeOf(local.visibleWindowTime).constructor;
    local.updateVisibleTime(new Span(t.startSec + Number(s), t.startSec + Number(e)));
    globals.rafScheduler.scheduleFullRedraw();
  }, start, end);
  await new Promise(r => setTimeout(r, 3000));
  await page.screenshot({path: out, clip: {x: 0, y: 0, width: 1600, height: Number(height)}});
  await browser.close();
})();
