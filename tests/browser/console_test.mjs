#!/usr/bin/env node
// tests/browser/console_test.mjs: the daemon's web console in a real browser (Debian's chromium, headless,
// driven by playwright-core from .deps/node). It starts a daemon with the demo fleet and two tenants, a policy
// whose floor calendar changes and nine days of billed history (`tessera bill record`), submits jobs (the
// example trainer, which checkpoints; short and waiting sleep jobs), then loads every
// page as admin and checks what it shows against the API's own answers, downloads the bill's CSV, logs in
// as a tenant and checks that another tenant's jobs and bills are absent, and saves a screenshot of each page.
//
// Usage: node console_test.mjs --tessera BIN --trainer BIN --source DIR [--screenshots DIR]
// Exit status: 0 passed, 1 failed, 77 skipped (no chromium or no playwright-core; ctest SKIP_RETURN_CODE).
import {execFileSync, spawn} from 'node:child_process';
import crypto from 'node:crypto';
import {createRequire} from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const args = Object.fromEntries(process.argv.slice(2).reduce(
    (acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const SRC = path.resolve(args.source || '.');
const TESSERA = path.resolve(args.tessera || 'build/tessera');
const TRAINER = path.resolve(args.trainer || 'build/examples/trainer');
const SHOTS = args.screenshots ? path.resolve(args.screenshots) : null;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

function skip(why) {
  console.log('SKIPPED: ' + why);
  process.exit(77);
}
if (!fs.existsSync(CHROMIUM))
  skip(CHROMIUM + ' not found (Debian package chromium; scripts/install-deps.sh installs it)');
let chromium;
try {
  ({chromium} = createRequire(path.join(SRC, '.deps/node/'))('playwright-core'));
} catch (e) {
  skip('playwright-core not found in ' + SRC + '/.deps/node (scripts/install-deps.sh installs it): ' + e.message);
}
for (const f of [TESSERA, TRAINER])
  if (!fs.existsSync(f)) skip(f + ' is not built');

let failures = 0;
function check(cond, what, detail) {
  if (cond) {
    console.log('ok   ' + what);
  } else {
    failures++;
    console.log('FAIL ' + what + (detail === undefined ? '' : '\n     ' + JSON.stringify(detail)));
  }
}
function eq(a, b, what) {
  check(JSON.stringify(a) === JSON.stringify(b), what, {page: a, api: b});
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(pred, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return;
    await sleep(100);
  }
  throw new Error('timed out waiting for ' + what);
}

// ---- the daemon ----------------------------------------------------------------------------------------
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-console-'));
// A daemon running as root may run jobs as an unprivileged user: what they write must be reachable by it.
fs.chmodSync(dir, 0o755);
const out = path.join(dir, 'out');
fs.mkdirSync(out);
fs.chmodSync(out, 0o777);
const state = path.join(dir, 'state');
const daemonLog = fs.openSync(path.join(dir, 'daemon.log'), 'a');
// Tenants alice (tok-alice) and bob (tok-bob): a `--tenants FILE` of token hashes (mode 0600) where this daemon
// takes one, else `--tenant NAME=TOKEN`.
function tenantFlags() {
  const help = spawnSyncText(TESSERA, ['daemon', '--help']);
  if (!help.includes('--tenants')) return ['--tenant', 'alice=tok-alice', '--tenant', 'bob=tok-bob'];
  const sha = (t) => crypto.createHash('sha256').update(t).digest('hex');
  const file = path.join(dir, 'tenants.yaml');
  fs.writeFileSync(
      file,
      `tenants:\n  - {name: alice, token_sha256: ${sha('tok-alice')}}\n` +
          `  - {name: bob, token_sha256: ${sha('tok-bob')}}\n`,
      {mode: 0o600});
  return ['--tenants', file];
}
function spawnSyncText(cmd, argv) {
  try {
    return execFileSync(cmd, argv, {encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe']});
  } catch (e) {
    return String(e.stdout || '') + String(e.stderr || '');
  }
}
const daemon = spawn(
    TESSERA, ['daemon', '--state-dir', state, '--port', '0', '--tick', '50ms', ...tenantFlags()],
    {stdio: ['ignore', daemonLog, daemonLog], env: {...process.env, TESSERA_HOME: state}});
let browser = null;

function cleanup() {
  try {
    daemon.kill('SIGTERM');
  } catch (e) { /* gone */
  }
  // Jobs run in their own sessions and outlive the daemon: stop this test's ones.
  for (const job of fs.existsSync(path.join(state, 'jobs')) ? fs.readdirSync(path.join(state, 'jobs')) : []) {
    const jd = path.join(state, 'jobs', job);
    for (const a of fs.readdirSync(jd).filter((x) => x.startsWith('attempt-'))) {
      const pidf = path.join(jd, a, 'pid.json');
      if (!fs.existsSync(pidf) || fs.existsSync(path.join(jd, a, 'exit.json'))) continue;
      const sid = JSON.parse(fs.readFileSync(pidf, 'utf8')).shim;
      try {
        execFileSync('pkill', ['-KILL', '-s', String(sid)]);
      } catch (e) { /* none left */
      }
    }
  }
}

let base = '', adminToken = '';
async function api(p, token, opts = {}) {
  const r = await fetch(base + p, {
    method: opts.method || 'GET',
    headers: {Authorization: 'Bearer ' + (token || adminToken), 'Content-Type': 'application/json'},
    body: opts.body ? JSON.stringify(opts.body) : undefined
  });
  if (opts.text) return r.text();
  const b = await r.json();
  if (!r.ok && !opts.allowError) throw new Error(p + ': ' + r.status + ' ' + JSON.stringify(b));
  return b;
}
const doc = (file) => ({source: path.basename(file), yaml: fs.readFileSync(file, 'utf8')});
function sleepJob(name, priority, cards, secs, compatible) {
  return `name: ${name}\npriority: ${priority}\nclass: mlp-train\ncards: ${cards}\ncompatible: ${compatible}\n` +
      `command: [${SRC}/tests/daemon/sleep_job.sh, "${secs}"]\nenv: {OUT_PREFIX: "${out}/${name}-"}\ngrace: 5s\n`;
}
const submit = async (token, yaml) =>
    (await api('/v1/jobs', token, {method: 'POST', body: {source: 'job.yaml', yaml, base_dir: dir}})).id;

async function main() {
  await waitFor(() => fs.existsSync(path.join(state, 'daemon.json')), 30000, 'the daemon to start');
  base = 'http://' + JSON.parse(fs.readFileSync(path.join(state, 'daemon.json'), 'utf8')).address;
  adminToken = fs.readFileSync(path.join(state, 'token'), 'utf8').trim();
  // The demo fleet and catalog; a policy whose floor calendar changes (40% from 20 days ago, 50% from 5 days
  // ago: today's floor is the demo's 50%).
  const day = (ago) => new Date(Date.now() - ago * 86400000).toISOString().slice(0, 10);
  const policy = `unit: cards\ncalendar:\n  - {from: ${day(20)}, floor: 40%}\n  - {from: ${day(5)}, floor: 50%}\n`;
  fs.writeFileSync(path.join(dir, 'policy.yaml'), policy);
  await api('/v1/fleet', null, {
    method: 'PUT',
    body: {
      fleet: doc(path.join(SRC, 'examples/demo/fleet.yaml')),
      catalog: doc(path.join(SRC, 'examples/demo/catalog.yaml')),
      policy: {source: 'policy.yaml', yaml: policy}
    }
  });
  // Nine days of history, appended to the daemon's ledger with `tessera bill record` (the ledger takes
  // several writers): 2 Ascend and 2 H800 cards for a few hours a day; some days fall below that day's floor.
  const hours = [[6, 4], [5, 5], [3, 7], [6, 4], [4, 6], [4, 6], [7, 3], [2, 8], [5, 5]];  // [910B h, H800 h]
  hours.forEach(([a, n], i) => {
    const d = day(9 - i), tenant = i % 2 ? 'bob' : 'alice';
    for (const [type, h] of [['ascend-910b', a], ['nvidia-h800', n]])
      execFileSync(TESSERA, [
        'bill', 'record', '--db', path.join(state, 'ledger.db'), '--catalog',
        path.join(SRC, 'examples/demo/catalog.yaml'), '--job', 'history-' + d, '--tenant', tenant, '--type', type,
        '--cards', '2', '--start', d + 'T08:00:00Z', '--end', d + 'T' + String(8 + h).padStart(2, '0') + ':00:00Z'
      ]);
  });

  // alice trains on both 910B cards (the example trainer: progress, loss, checkpoints); bob's short job
  // runs on one H800 and is billed; two jobs wait for the 910B cards alice-train holds (a job no zone could
  // ever hold is refused at submit, so both fit an empty fleet).
  const train = await submit(
      'tok-alice',
      `name: alice-train\npriority: 1\nclass: mlp-train\ncards: 2\n` +
          `compatible: [ascend]\ncommand: [${TRAINER}, --steps, "100000", --batch, "64", --print-every, "20", ` +
          `--step-delay-ms, "20"]\ncheckpoint: {every: 100}\ngrace: 10s\n`);
  await waitFor(async () => (await api('/v1/jobs/' + train)).state === 'running', 30000, 'alice-train to run');
  const short = await submit('tok-bob', sleepJob('bob-eval', 0, 1, 1, '[nvidia]'));
  const big = await submit('tok-alice', sleepJob('alice-big', 0, 2, 1, '[ascend]'));
  const wait = await submit('tok-bob', sleepJob('bob-wait', 0, 2, 1, '[ascend]'));
  await waitFor(async () => {
    const s = await api('/v1/jobs/' + short);
    const t = await api('/v1/jobs/' + train);
    return s.state === 'succeeded' && s.attempts_detail.every((a) => a.billed) && t.checkpoints.length >= 1 &&
        t.progress && (await api('/v1/jobs/' + wait)).position !== null &&
        (await api('/v1/jobs/' + big)).position !== null;
  }, 90000, 'bob-eval billed, alice-train checkpointed, the others queued');

  browser = await chromium.launch({executablePath: CHROMIUM, headless: true});
  const shot = async (page, name) => {
    if (!SHOTS) return;
    fs.mkdirSync(SHOTS, {recursive: true});
    await page.screenshot({path: path.join(SHOTS, 'console-' + name + '.png'), fullPage: true});
  };
  const open = async (page, hash, name) => {
    const before = await page.evaluate(() => document.getElementById('main').dataset.loaded || '0');
    await page.goto(base + '/' + hash);
    // Rendered for this hash (a refresh of the previous view may land first), after the navigation.
    await page.waitForFunction(([h, n, b]) => {
      const m = document.getElementById('main');
      return m.dataset.view === h && (m.dataset.page === n || m.dataset.page === 'error') &&
          (m.dataset.loaded || '0') !== b;
    }, [hash, name, before]);
  };
  const rows = (page, id) => page.$$eval(
      '#' + id + ' tbody tr',
      (trs) => trs.map((tr) => ({data: {...tr.dataset}, cells: [...tr.children].map((td) => td.textContent)})));
  const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

  // ---- admin ----
  const ctx = await browser.newContext({viewport: {width: 1280, height: 900}, acceptDownloads: true});
  ctx.setDefaultTimeout(60000);  // generous: ctest runs this next to other tests on a loaded machine
  const page = await ctx.newPage();
  page.on('pageerror', (e) => check(false, 'no script error in the page', String(e)));
  await page.goto(base + '/');
  check((await text(page, '#main')).includes('Log in'), 'before login the console asks for a token');
  await page.fill('#token', adminToken);
  await page.click('#login-button');
  await page.waitForFunction(() => document.getElementById('main').dataset.page === 'fleet');
  check((await text(page, '#who')).startsWith('admin'), 'logged in as admin');
  const stored = await page.evaluate(() => ({s: sessionStorage.getItem('tessera.token'), l: localStorage.length}));
  check(stored.s === adminToken && stored.l === 0, 'the token is kept in session storage only');

  // Fleet: every node's cards, busy and free as /v1/fleet says; emulated cards labelled.
  await open(page, '#/fleet', 'fleet');
  const fleet = await api('/v1/fleet');
  const nodes = await rows(page, 'fleet-nodes');
  eq(nodes.map((r) => [r.data.node, ...r.cells.slice(1, 6)]),
     fleet.nodes.map((n) => [n.id, n.zone, n.type, String(n.cards), String(n.used), String(n.free)]),
     'fleet: nodes, cards, busy and free match /v1/fleet');
  check(nodes.every((r) => r.cells[7] === 'emulated (host ranks)'), 'fleet: emulated cards are labelled');
  eq(await text(page, '#fleet-share'), fleet.share_now, 'fleet: domestic share now matches /v1/fleet');
  eq(await text(page, '#fleet-floor'), fleet.floor_today + ' (' + fleet.unit + ')', 'fleet: floor matches /v1/fleet');
  const cost = await api('/v1/cost');
  eq(await text(page, '#fleet-cost'), cost.cost_per_hour + ' ' + cost.currency,
     'fleet: cost per hour now matches /v1/cost');
  eq((await rows(page, 'fleet-catalog')).map((r) => [r.data.type, r.cells[4]]),
     cost.by_type.map((t) => [t.type, t.cost_per_hour]), 'fleet: cost per hour per type matches /v1/cost');
  check(cost.cost_per_hour === '4.80', 'fleet: two 910B cards at 2.40 cost 4.80 per hour', cost);
  const groups = await rows(page, 'fleet-groups');
  check(
      groups.length === 2 && groups.every((g) => g.cells[9] === 'emulated (host ranks)'),
      'fleet: one row per type and zone');
  await shot(page, 'fleet');

  // Queue: the waiting jobs with their position and the planner's reason, as /v1/jobs (`tessera queue`).
  await open(page, '#/queue', 'queue');
  const jobs = (await api('/v1/jobs')).jobs;
  const waiting = await rows(page, 'queue-waiting');
  eq(waiting.map((r) => [Number(r.data.jobId), r.cells[0], r.cells[6]]),
     jobs.filter((j) => j.state === 'queued')
         .sort((a, b) => a.position - b.position)
         .map((j) => [j.id, String(j.position), j.reason]),
     'queue: waiting jobs, positions and reasons match /v1/jobs');
  check(
      waiting.length === 2 && waiting.every((r) => r.cells[6].length > 0), 'queue: two jobs wait, each with a reason');
  const running = await rows(page, 'queue-running');
  eq(running.map((r) => Number(r.data.jobId)), jobs.filter((j) => j.state === 'running').map((j) => j.id),
     'queue: running jobs match /v1/jobs');
  check(
      running.length === 1 && running[0].cells[5] === '2× ascend-910b (emulated)',
      'queue: the running job shows its cards');
  const done = await rows(page, 'queue-done');
  check(done.some((r) => Number(r.data.jobId) === short && r.cells[3] === 'succeeded'), 'queue: finished job listed');
  await shot(page, 'queue');

  // Job: state, attempts, progress, checkpoints with tiers, events, log tail.
  const before = await api('/v1/jobs/' + train);
  await open(page, '#/job/' + train, 'job');
  const after = await api('/v1/jobs/' + train);
  eq(await text(page, '#job-state'), after.state, 'job: state matches /v1/jobs/ID');
  eq(await text(page, '#job-tenant'), 'alice', 'job: tenant');
  const prog = Number((await text(page, '#job-progress')).match(/step (\d+)/)[1]);
  check(
      prog >= before.progress.step && prog <= after.progress.step, 'job: progress between two API reads',
      {page: prog, before: before.progress.step, after: after.progress.step});
  check(/^[0-9.eE+-]+$/.test(await text(page, '#job-loss')), 'job: the loss is shown');
  const atts = await rows(page, 'job-attempts-table');
  eq(atts.map((r) => Number(r.data.attempt)), after.attempts_detail.map((a) => a.n), 'job: attempts match /v1/jobs/ID');
  const cks = (await rows(page, 'job-checkpoints')).map((r) => ({step: Number(r.data.step), tiers: r.cells[1]}));
  const apiSteps = new Set([...before.checkpoints, ...after.checkpoints]);
  check(
      cks.length > 0 && cks.every((c) => apiSteps.has(c.step) && c.tiers === 'hot'),
      'job: checkpoints are the API\'s steps, in the hot tier', {page: cks, api: [...apiSteps]});
  const events = await rows(page, 'job-events');
  check(events.length >= before.events.length && events.length <= after.events.length, 'job: events from the API');
  const log = await text(page, '#job-log');
  check(log.includes('=== tessera daemon: job ' + train + ' (alice-train) attempt 1'), 'job: the log tail is shown');
  await shot(page, 'job');

  // Compliance: today's share and floor as /v1/compliance (the ledger), chart with one bar per used day.
  await open(page, '#/compliance', 'compliance');
  const comp = await api('/v1/compliance?days=14');
  const days = await rows(page, 'compliance-days');
  eq(days.map((r) => [r.data.day, r.cells[1], r.cells[2], r.cells[3]]),
     comp.days.slice().reverse().map(
         (d) => [d.day, d.used ? d.share : 'no usage', d.floor, d.used ? (d.compliant ? 'yes' : 'NO') : '-']),
     'compliance: every day matches /v1/compliance');
  const bars = await page.$$eval('#compliance-chart rect[data-day]', (rs) => rs.map((r) => r.dataset.day));
  eq(bars, comp.days.filter((d) => d.used).map((d) => d.day), 'compliance: one bar per day with usage');
  const belowBars = await page.$$eval('#compliance-chart rect.below', (rs) => rs.map((r) => r.dataset.day));
  eq(belowBars, comp.days.filter((d) => d.used && !d.compliant).map((d) => d.day),
     'compliance: days below the floor marked');
  eq(await text(page, '#compliance-floor-today'), comp.floor_today, 'compliance: floor in force today');
  check(
      belowBars.length >= 3 && comp.days.filter((d) => d.used).length >= 10, 'compliance: history with days below',
      belowBars);
  // Each used day as `tessera bill compliance --day D` reports it over the same ledger and policy.
  for (const d of comp.days.filter((x) => x.used)) {
    let out;
    try {
      out = execFileSync(
          TESSERA,
          [
            'bill', 'compliance', '--day', d.day, '--policy', path.join(dir, 'policy.yaml'), '--db',
            path.join(state, 'ledger.db')
          ],
          {encoding: 'utf8'});
    } catch (e) {
      out = e.stdout;  // exit status 1: not compliant
    }
    const m = out.match(/domestic share (\S+) against a floor of (\S+) in force that day: (\S+)/);
    eq(m && [m[1], m[2], m[3]], [d.share, d.floor, d.compliant ? 'COMPLIANT' : 'NOT'],
       'compliance: ' + d.day + ' as `tessera bill compliance`');
  }
  await shot(page, 'compliance');
  await open(page, '#/compliance/30', 'compliance');
  eq((await rows(page, 'compliance-days')).length, (await api('/v1/compliance?days=30')).days.length,
     'compliance: the last 30 days on request');

  // Bill: rows per day, type and tenant as /v1/bill/daily; the CSV download is the API's CSV.
  await open(page, '#/bill', 'bill');
  const bill = await api('/v1/bill/daily');
  eq((await rows(page, 'bill-rows')).map((r) => r.cells),
     bill.rows.map((r) => [r.day, r.type, r.tenant, String(r.card_seconds), r.amount]),
     'bill: rows match /v1/bill/daily');
  eq(await text(page, '#bill-total'), bill.total + ' ' + bill.currency, 'bill: total');
  check(bill.rows.some((r) => r.tenant === 'bob'), 'bill: bob was billed');
  // Per type and per tenant: the same amounts as `tessera bill --by type|tenant` over the daemon's ledger.
  const cli = (by) =>
      execFileSync(TESSERA, ['bill', '--by', by, '--csv', '--db', path.join(state, 'ledger.db')], {encoding: 'utf8'})
          .trim()
          .split('\n')
          .slice(1)
          .map((l) => l.split(','))
          .map((f) => [f[0], f[3]]);
  eq((await rows(page, 'bill-by-type')).map((r) => [r.cells[0], r.cells[2]]), cli('type'),
     'bill: per type as `tessera bill --by type`');
  eq((await rows(page, 'bill-by-tenant')).map((r) => [r.cells[0], r.cells[2]]), cli('tenant'),
     'bill: per tenant as `tessera bill --by tenant`');
  const tenantBars = await page.$$eval('#bill-tenant-chart rect', (rs) => rs.map((r) => r.dataset.tenant));
  eq(tenantBars, cli('tenant').map((r) => r[0]), 'bill: one bar per tenant');
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#bill-csv')]);
  const csv = fs.readFileSync(await download.path(), 'utf8');
  eq(csv, await api('/v1/bill/daily?format=csv', null, {text: true}), 'bill: the CSV download is the API\'s CSV');
  await shot(page, 'bill');

  // ---- a tenant: bob sees his jobs and bills, not alice's ----
  const bctx = await browser.newContext({viewport: {width: 1280, height: 900}});
  bctx.setDefaultTimeout(60000);
  const bp = await bctx.newPage();
  await bp.goto(base + '/#/queue');
  check(!(await bp.evaluate(() => sessionStorage.getItem('tessera.token'))), 'a new browser session is not logged in');
  await bp.fill('#token', 'tok-bob');
  await bp.click('#login-button');
  await bp.waitForFunction(() => document.getElementById('main').dataset.page === 'queue');
  eq(await text(bp, '#who'), 'tenant bob', 'logged in as tenant bob');
  const bobIds =
      [...(await rows(bp, 'queue-running')), ...(await rows(bp, 'queue-waiting')), ...(await rows(bp, 'queue-done'))]
          .map((r) => Number(r.data.jobId))
          .sort();
  eq(bobIds, (await api('/v1/jobs?all=1', 'tok-bob')).jobs.map((j) => j.id).sort(), 'bob: the queue shows his jobs');
  check(!bobIds.includes(train) && !bobIds.includes(big), 'bob: alice\'s jobs are absent', bobIds);
  check(!(await text(bp, '#main')).includes('alice'), 'bob: no mention of alice on the queue page');
  await open(bp, '#/bill', 'bill');
  const bobBill = await rows(bp, 'bill-rows');
  check(bobBill.length > 0 && bobBill.every((r) => r.cells[2] === 'bob'), 'bob: only his bill rows', bobBill);
  eq(await text(bp, '#bill-total'), (await api('/v1/bill/daily', 'tok-bob')).total + ' CNY', 'bob: his total');
  await shot(bp, 'tenant-bill');
  await open(bp, '#/job/' + train, 'job');
  check((await text(bp, '#main')).includes('job ' + train + ' not found'), 'bob: alice\'s job page says not found');
  await shot(bp, 'tenant-job-not-found');
}

main()
    .then(
        () => 0,
        (e) => {
          console.log('FAIL ' + (e.stack || e));
          try {
            console.log('daemon log tail:\n' + fs.readFileSync(path.join(dir, 'daemon.log'), 'utf8').slice(-3000));
          } catch (x) { /* none */
          }
          return 1;
        })
    .then(async (rc) => {
      if (browser) await browser.close();
      cleanup();
      const status = rc || (failures ? 1 : 0);
      console.log(status ? `console test FAILED (${failures} check(s) failed)` : 'console test passed');
      if (!status) fs.rmSync(dir, {recursive: true, force: true});
      process.exit(status);
    });
