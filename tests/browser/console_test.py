#!/usr/bin/env python3
"""tests/browser/console_test.py: the daemon's web console in a real browser (Debian's chromium, headless,
driven by Python playwright from the project's .venv, which never downloads a browser here: it is handed
chromium's path). It starts a daemon with the demo fleet and two tenants, a policy whose floor calendar changes
and nine days of billed history (`tessera bill record`), submits jobs (the example trainer, which checkpoints;
short and waiting sleep jobs), then loads every page as admin and checks what it shows against the API's own
answers, downloads the bill's CSV, logs in as a tenant and checks that another tenant's jobs and bills are
absent, and saves a screenshot of each page.

Usage: .venv/bin/python console_test.py --tessera BIN --trainer BIN --source DIR [--screenshots DIR]
Exit status: 0 passed, 1 failed, 77 skipped (no chromium or no playwright; ctest SKIP_RETURN_CODE).
CHROMIUM overrides the browser (default /usr/bin/chromium).
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

sys.stdout.reconfigure(line_buffering=True)  # ctest reads a pipe: keep our lines in order with the daemon's

ap = argparse.ArgumentParser(description='The web console in a real browser (see the file\'s docstring).')
ap.add_argument('--tessera', default='build/tessera')
ap.add_argument('--trainer', default='build/examples/trainer')
ap.add_argument('--source', default='.')
ap.add_argument('--screenshots')
args = ap.parse_args()
SRC = os.path.abspath(args.source)
TESSERA = os.path.abspath(args.tessera)
TRAINER = os.path.abspath(args.trainer)
SHOTS = os.path.abspath(args.screenshots) if args.screenshots else None
CHROMIUM = os.environ.get('CHROMIUM') or '/usr/bin/chromium'


def skip(why):
    print('SKIPPED: ' + why)
    sys.exit(77)


if not os.path.exists(CHROMIUM):
    skip(CHROMIUM + ' not found (Debian package chromium; scripts/install-deps.sh installs it)')
try:
    from playwright.sync_api import sync_playwright
except ImportError as e:
    skip('playwright not importable by ' + sys.executable + ' (scripts/install-deps.sh installs it into ' + SRC +
         '/.venv from python/requirements-test.txt): ' + str(e))
for f in (TESSERA, TRAINER):
    if not os.path.exists(f):
        skip(f + ' is not built')

failures = 0


def check(cond, what, detail=None):
    global failures
    if cond:
        print('ok   ' + what)
    else:
        failures += 1
        print('FAIL ' + what + ('' if detail is None else '\n     ' + json.dumps(detail)))


def eq(a, b, what):
    check(json.dumps(a) == json.dumps(b), what, {'page': a, 'api': b})


def at(cells, i):
    """cells[i], or None past the end (a row with fewer cells fails its check instead of raising)."""
    return cells[i] if i < len(cells) else None


def wait_for(pred, secs, what):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise RuntimeError('timed out waiting for ' + what)


def run_text(argv, check_rc=True):
    """argv's stdout as text (no newline translation); raises on a non-zero exit when check_rc."""
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, check=check_rc)
    return r.stdout.decode('utf-8')


# ---- the daemon ----------------------------------------------------------------------------------------
tmp = tempfile.mkdtemp(prefix='tessera-console-')
# A daemon running as root may run jobs as an unprivileged user: what they write must be reachable by it.
os.chmod(tmp, 0o755)
out = os.path.join(tmp, 'out')
os.mkdir(out)
os.chmod(out, 0o777)
state = os.path.join(tmp, 'state')
daemon_log = open(os.path.join(tmp, 'daemon.log'), 'ab')


def tenant_flags():
    """Tenants alice (tok-alice) and bob (tok-bob): a `--tenants FILE` of token hashes (mode 0600) where this
    daemon takes one, else `--tenant NAME=TOKEN`."""
    r = subprocess.run([TESSERA, 'daemon', '--help'], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    usage = r.stdout.decode(errors='replace') + ('' if r.returncode == 0 else r.stderr.decode(errors='replace'))
    if '--tenants' not in usage:
        return ['--tenant', 'alice=tok-alice', '--tenant', 'bob=tok-bob']

    def sha(t):
        return hashlib.sha256(t.encode()).hexdigest()

    file = os.path.join(tmp, 'tenants.yaml')
    with os.fdopen(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), 'w') as f:
        f.write(f'tenants:\n  - {{name: alice, token_sha256: {sha("tok-alice")}}}\n'
                f'  - {{name: bob, token_sha256: {sha("tok-bob")}}}\n')
    return ['--tenants', file]


daemon = subprocess.Popen(
    [TESSERA, 'daemon', '--state-dir', state, '--port', '0', '--tick', '50ms', *tenant_flags()],
    stdin=subprocess.DEVNULL, stdout=daemon_log, stderr=daemon_log, env={**os.environ, 'TESSERA_HOME': state})


def cleanup():
    if daemon.poll() is None:
        daemon.terminate()
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            print('the daemon did not stop within 30 s of SIGTERM: killing it')
            daemon.kill()
            daemon.wait()
    # Jobs run in their own sessions and outlive the daemon: stop this test's ones.
    jobs_dir = os.path.join(state, 'jobs')
    for job in os.listdir(jobs_dir) if os.path.isdir(jobs_dir) else []:
        jd = os.path.join(jobs_dir, job)
        for a in (x for x in os.listdir(jd) if x.startswith('attempt-')):
            pidf = os.path.join(jd, a, 'pid.json')
            if not os.path.exists(pidf) or os.path.exists(os.path.join(jd, a, 'exit.json')):
                continue
            with open(pidf) as f:
                sid = json.load(f)['shim']
            subprocess.run(['pkill', '-KILL', '-s', str(sid)])  # exit 1: none left


base = ''
admin_token = ''


def api(p, token=None, method='GET', body=None, text=False, allow_error=False):
    req = urllib.request.Request(
        base + p, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={'Authorization': 'Bearer ' + (token or admin_token), 'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    if text:
        return raw.decode('utf-8')
    b = json.loads(raw)
    if not 200 <= status < 300 and not allow_error:
        raise RuntimeError(p + ': ' + str(status) + ' ' + json.dumps(b))
    return b


def doc(file):
    with open(file, encoding='utf-8') as f:
        return {'source': os.path.basename(file), 'yaml': f.read()}


def sleep_job(name, priority, cards, secs, compatible):
    return (f'name: {name}\npriority: {priority}\nclass: mlp-train\ncards: {cards}\ncompatible: {compatible}\n'
            f'command: [{SRC}/tests/daemon/sleep_job.sh, "{secs}"]\nenv: {{OUT_PREFIX: "{out}/{name}-"}}\ngrace: 5s\n')


def submit(token, yaml):
    return api('/v1/jobs', token, method='POST', body={'source': 'job.yaml', 'yaml': yaml, 'base_dir': tmp})['id']


def main(pw):
    global base, admin_token

    def started():
        if daemon.poll() is not None:
            raise RuntimeError('the daemon exited with status ' + str(daemon.returncode) + ' before it started')
        return os.path.exists(os.path.join(state, 'daemon.json'))

    wait_for(started, 30, 'the daemon to start')
    with open(os.path.join(state, 'daemon.json')) as f:
        base = 'http://' + json.load(f)['address']
    with open(os.path.join(state, 'token')) as f:
        admin_token = f.read().strip()
    # The demo fleet and catalog; a policy whose floor calendar changes (40% from 20 days ago, 50% from 5 days
    # ago: today's floor is the demo's 50%).
    def day(ago):  # the UTC date `ago` days back
        return (datetime.now(timezone.utc) - timedelta(days=ago)).strftime('%Y-%m-%d')

    policy = f'unit: cards\ncalendar:\n  - {{from: {day(20)}, floor: 40%}}\n  - {{from: {day(5)}, floor: 50%}}\n'
    with open(os.path.join(tmp, 'policy.yaml'), 'w') as f:
        f.write(policy)
    api('/v1/fleet', method='PUT', body={
        'fleet': doc(os.path.join(SRC, 'examples/demo/fleet.yaml')),
        'catalog': doc(os.path.join(SRC, 'examples/demo/catalog.yaml')),
        'policy': {'source': 'policy.yaml', 'yaml': policy},
    })
    # Nine days of history, appended to the daemon's ledger with `tessera bill record` (the ledger takes
    # several writers): 2 Ascend and 2 H800 cards for a few hours a day; some days fall below that day's floor.
    hours = [[6, 4], [5, 5], [3, 7], [6, 4], [4, 6], [4, 6], [7, 3], [2, 8], [5, 5]]  # [910B h, H800 h]
    for i, (a, n) in enumerate(hours):
        d, tenant = day(9 - i), 'bob' if i % 2 else 'alice'
        for card_type, h in (('ascend-910b', a), ('nvidia-h800', n)):
            run_text([
                TESSERA, 'bill', 'record', '--db', os.path.join(state, 'ledger.db'), '--catalog',
                os.path.join(SRC, 'examples/demo/catalog.yaml'), '--job', 'history-' + d, '--tenant', tenant,
                '--type', card_type, '--cards', '2', '--start', d + 'T08:00:00Z', '--end', f'{d}T{8 + h:02d}:00:00Z'
            ])

    # alice trains on both 910B cards (the example trainer: progress, loss, checkpoints); bob's short job
    # runs on one H800 and is billed; two jobs wait for the 910B cards alice-train holds (a job no zone could
    # ever hold is refused at submit, so both fit an empty fleet).
    train = submit(
        'tok-alice',
        f'name: alice-train\npriority: 1\nclass: mlp-train\ncards: 2\n'
        f'compatible: [ascend]\ncommand: [{TRAINER}, --steps, "100000", --batch, "64", --print-every, "20", '
        f'--step-delay-ms, "20"]\ncheckpoint: {{every: 100}}\ngrace: 10s\n')
    wait_for(lambda: api(f'/v1/jobs/{train}')['state'] == 'running', 30, 'alice-train to run')
    short = submit('tok-bob', sleep_job('bob-eval', 0, 1, 1, '[nvidia]'))
    big = submit('tok-alice', sleep_job('alice-big', 0, 2, 1, '[ascend]'))
    wait = submit('tok-bob', sleep_job('bob-wait', 0, 2, 1, '[ascend]'))

    def settled():
        s = api(f'/v1/jobs/{short}')
        t = api(f'/v1/jobs/{train}')
        return (s['state'] == 'succeeded' and all(a['billed'] for a in s['attempts_detail']) and
                len(t['checkpoints']) >= 1 and t.get('progress') is not None and
                api(f'/v1/jobs/{wait}').get('position') is not None and
                api(f'/v1/jobs/{big}').get('position') is not None)

    wait_for(settled, 90, 'bob-eval billed, alice-train checkpointed, the others queued')

    browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)

    def shot(page, name):
        if not SHOTS:
            return
        os.makedirs(SHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SHOTS, 'console-' + name + '.png'), full_page=True)

    def open_view(page, view, name):
        before = page.evaluate("() => document.getElementById('main').dataset.loaded || '0'")
        page.goto(base + '/' + view)
        # Rendered for this hash (a refresh of the previous view may land first), after the navigation.
        page.wait_for_function(
            """([h, n, b]) => {
              const m = document.getElementById('main');
              return m.dataset.view === h && (m.dataset.page === n || m.dataset.page === 'error') &&
                  (m.dataset.loaded || '0') !== b;
            }""", arg=[view, name, before])

    def rows(page, table):
        return page.eval_on_selector_all(
            '#' + table + ' tbody tr',
            '(trs) => trs.map((tr) => ({data: {...tr.dataset}, cells: [...tr.children].map((td) => td.textContent)}))')

    def text(page, sel):
        return page.eval_on_selector(sel, '(e) => e.textContent')

    # ---- admin ----
    ctx = browser.new_context(viewport={'width': 1280, 'height': 900}, accept_downloads=True)
    ctx.set_default_timeout(60000)  # generous: ctest runs this next to other tests on a loaded machine
    page = ctx.new_page()
    page.on('pageerror', lambda e: check(False, 'no script error in the page', str(e)))
    page.goto(base + '/')
    check('Log in' in text(page, '#main'), 'before login the console asks for a token')
    page.fill('#token', admin_token)
    page.click('#login-button')
    page.wait_for_function("() => document.getElementById('main').dataset.page === 'fleet'")
    check(text(page, '#who').startswith('admin'), 'logged in as admin')
    stored = page.evaluate("() => ({s: sessionStorage.getItem('tessera.token'), l: localStorage.length})")
    check(stored['s'] == admin_token and stored['l'] == 0, 'the token is kept in session storage only')

    # Fleet: every node's cards, busy and free as /v1/fleet says; emulated cards labelled.
    open_view(page, '#/fleet', 'fleet')
    fleet = api('/v1/fleet')
    nodes = rows(page, 'fleet-nodes')
    eq([[r['data'].get('node'), *r['cells'][1:6]] for r in nodes],
       [[n['id'], n['zone'], n['type'], str(n['cards']), str(n['used']), str(n['free'])] for n in fleet['nodes']],
       'fleet: nodes, cards, busy and free match /v1/fleet')
    check(all(at(r['cells'], 7) == 'emulated (host ranks)' for r in nodes), 'fleet: emulated cards are labelled')
    eq(text(page, '#fleet-share'), fleet['share_now'], 'fleet: domestic share now matches /v1/fleet')
    eq(text(page, '#fleet-floor'), fleet['floor_today'] + ' (' + fleet['unit'] + ')',
       'fleet: floor matches /v1/fleet')
    cost = api('/v1/cost')
    eq(text(page, '#fleet-cost'), cost['cost_per_hour'] + ' ' + cost['currency'],
       'fleet: cost per hour now matches /v1/cost')
    eq([[r['data'].get('type'), at(r['cells'], 4)] for r in rows(page, 'fleet-catalog')],
       [[t['type'], t['cost_per_hour']] for t in cost['by_type']], 'fleet: cost per hour per type matches /v1/cost')
    check(cost['cost_per_hour'] == '4.80', 'fleet: two 910B cards at 2.40 cost 4.80 per hour', cost)
    groups = rows(page, 'fleet-groups')
    check(len(groups) == 2 and all(at(g['cells'], 9) == 'emulated (host ranks)' for g in groups),
          'fleet: one row per type and zone')
    shot(page, 'fleet')

    # Queue: the waiting jobs with their position and the planner's reason, as /v1/jobs (`tessera queue`).
    open_view(page, '#/queue', 'queue')
    jobs = api('/v1/jobs')['jobs']
    waiting = rows(page, 'queue-waiting')
    eq([[int(r['data']['jobId']), at(r['cells'], 0), at(r['cells'], 7)] for r in waiting],
       [[j['id'], str(j['position']), j['reason']]
        for j in sorted((j for j in jobs if j['state'] == 'queued'), key=lambda j: j['position'])],
       'queue: waiting jobs, positions and reasons match /v1/jobs')
    check(len(waiting) == 2 and all(len(at(r['cells'], 7) or '') > 0 for r in waiting),
          'queue: two jobs wait, each with a reason')
    # The estimated start, as `tessera queue`: "~TIME" (from the running jobs' estimated ends), or "unknown: why".
    by_id = {j['id']: j for j in jobs}
    for r in waiting:
        j, cell = by_id[int(r['data']['jobId'])], at(r['cells'], 8) or ''
        # a time moves with the running job's pace between the two reads: its form, and the reason when unknown
        want = ('~' if isinstance(j.get('estimated_start_ms'), int) else 'unknown: ' + j.get('estimated_start', ''))
        stamp = re.compile(r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ?')  # times inside a reason move the same way
        check(cell.startswith(want) if want == '~' else stamp.sub('T', cell) == stamp.sub('T', want),
              f'queue: job {j["id"]}\'s estimated start as /v1/jobs gives it', {'page': cell, 'api': want})
    check(all((at(r['cells'], 8) or '').startswith(('~', 'unknown: ')) for r in waiting),
          'queue: each waiting job shows an estimated start or why it is unknown')
    running = rows(page, 'queue-running')
    eq([int(r['data']['jobId']) for r in running], [j['id'] for j in jobs if j['state'] == 'running'],
       'queue: running jobs match /v1/jobs')
    check(len(running) == 1 and at(running[0]['cells'], 5) == '2× ascend-910b (emulated)',
          'queue: the running job shows its cards')
    check(len(running) == 1 and re.fullmatch(r'\d+:\d\d', at(running[0]['cells'], 8) or '') is not None,
          'queue: the running job shows its elapsed time (M:SS)', at(running[0]['cells'], 8) if running else None)
    done = rows(page, 'queue-done')
    check(any(int(r['data']['jobId']) == short and at(r['cells'], 3) == 'succeeded' for r in done),
          'queue: finished job listed')
    shot(page, 'queue')

    # Job: state, attempts, progress, checkpoints with tiers, events, log tail.
    before = api(f'/v1/jobs/{train}')
    open_view(page, f'#/job/{train}', 'job')
    after = api(f'/v1/jobs/{train}')
    eq(text(page, '#job-state'), after['state'], 'job: state matches /v1/jobs/ID')
    eq(text(page, '#job-tenant'), 'alice', 'job: tenant')
    progress = text(page, '#job-progress')
    m = re.search(r'step (\d+)', progress)
    if not m:
        raise RuntimeError('job: no "step N" in the progress shown: ' + json.dumps(progress))
    prog = int(m[1])
    check(before['progress']['step'] <= prog <= after['progress']['step'], 'job: progress between two API reads',
          {'page': prog, 'before': before['progress']['step'], 'after': after['progress']['step']})
    check(re.fullmatch(r'[0-9.eE+-]+', text(page, '#job-loss')) is not None, 'job: the loss is shown')
    atts = rows(page, 'job-attempts-table')
    eq([int(r['data']['attempt']) for r in atts], [a['n'] for a in after['attempts_detail']],
       'job: attempts match /v1/jobs/ID')
    cks = [{'step': int(r['data']['step']), 'tiers': at(r['cells'], 1)} for r in rows(page, 'job-checkpoints')]
    api_steps = set(before['checkpoints']) | set(after['checkpoints'])
    check(len(cks) > 0 and all(c['step'] in api_steps and c['tiers'] == 'hot' for c in cks),
          'job: checkpoints are the API\'s steps, in the hot tier', {'page': cks, 'api': sorted(api_steps)})
    events = rows(page, 'job-events')
    check(len(before['events']) <= len(events) <= len(after['events']), 'job: events from the API')
    log = text(page, '#job-log')
    check(f'=== tessera daemon: job {train} (alice-train) attempt 1' in log, 'job: the log tail is shown')
    # The loss curve: one point per "step N loss L" the API reads from the log, the estimated end while it runs.
    curve = api(f'/v1/jobs/{train}/progress')
    drawn = page.eval_on_selector('#job-loss-line', '(e) => Number(e.dataset.points)')
    check(2 <= drawn <= len(curve['points']) and curve['of'] == after['progress'].get('of'),
          'job: the loss curve has the API\'s points', {'drawn': drawn, 'api': len(curve['points'])})
    if after['state'] == 'running' and 'estimated_end_ms' in after:
        check(re.match(r'step \d+ of \d+ \([0-9.]+%\), ends ~', text(page, '#job-eta')) is not None,
              'job: how far it is and its estimated end are on the chart', text(page, '#job-eta'))
    summary = text(page, '#job-checkpoint-summary')
    check(re.match(r'\d+ checkpoint\(s\), steps \d+ … \d+, [0-9.]+ [KM]iB stored', summary) is not None and len(cks) <= 5,
          'job: checkpoints counted, the newest 5 listed', summary)
    shot(page, 'job')

    # Compliance: today's share and floor as /v1/compliance (the ledger), chart with one bar per used day.
    open_view(page, '#/compliance', 'compliance')
    comp = api('/v1/compliance?days=14')
    days = rows(page, 'compliance-days')
    eq([[r['data'].get('day'), *r['cells'][1:4]] for r in days],
       [[d['day'], d['share'] if d['used'] else 'no usage', d['floor'],
         ('yes' if d['compliant'] else 'NO') if d['used'] else '-'] for d in reversed(comp['days'])],
       'compliance: every day matches /v1/compliance')
    bars = page.eval_on_selector_all('#compliance-chart rect[data-day]', '(rs) => rs.map((r) => r.dataset.day)')
    eq(bars, [d['day'] for d in comp['days'] if d['used']], 'compliance: one bar per day with usage')
    below_bars = page.eval_on_selector_all('#compliance-chart rect.below', '(rs) => rs.map((r) => r.dataset.day)')
    eq(below_bars, [d['day'] for d in comp['days'] if d['used'] and not d['compliant']],
       'compliance: days below the floor marked')
    eq(text(page, '#compliance-floor-today'), comp['floor_today'], 'compliance: floor in force today')
    check(len(below_bars) >= 3 and len([d for d in comp['days'] if d['used']]) >= 10,
          'compliance: history with days below', below_bars)
    # Each used day as `tessera bill compliance --day D` reports it over the same ledger and policy.
    for d in (x for x in comp['days'] if x['used']):
        said = run_text([  # exit status 1: not compliant
            TESSERA, 'bill', 'compliance', '--day', d['day'], '--policy', os.path.join(tmp, 'policy.yaml'), '--db',
            os.path.join(state, 'ledger.db')
        ], check_rc=False)
        m = re.search(r'domestic share (\S+) against a floor of (\S+) in force that day: (\S+)', said)
        eq(m and [m[1], m[2], m[3]], [d['share'], d['floor'], 'COMPLIANT' if d['compliant'] else 'NOT'],
           'compliance: ' + d['day'] + ' as `tessera bill compliance`')
    shot(page, 'compliance')
    open_view(page, '#/compliance/30', 'compliance')
    eq(len(rows(page, 'compliance-days')), len(api('/v1/compliance?days=30')['days']),
       'compliance: the last 30 days on request')

    # Bill: rows per day, type and tenant as /v1/bill/daily; the CSV download is the API's CSV.
    open_view(page, '#/bill', 'bill')
    bill = api('/v1/bill/daily')
    eq([r['cells'] for r in rows(page, 'bill-rows')],
       [[r['day'], r['type'], r['tenant'], str(r['card_seconds']), r['amount']] for r in bill['rows']],
       'bill: rows match /v1/bill/daily')
    eq(text(page, '#bill-total'), bill['total'] + ' ' + bill['currency'], 'bill: total')
    check(any(r['tenant'] == 'bob' for r in bill['rows']), 'bill: bob was billed')

    # Per type and per tenant: the same amounts as `tessera bill --by type|tenant` over the daemon's ledger.
    def cli(by):
        csv = run_text([TESSERA, 'bill', '--by', by, '--csv', '--db', os.path.join(state, 'ledger.db')])
        return [[f[0], at(f, 3)] for f in (line.split(',') for line in csv.strip().split('\n')[1:])]

    eq([[at(r['cells'], 0), at(r['cells'], 2)] for r in rows(page, 'bill-by-type')], cli('type'),
       'bill: per type as `tessera bill --by type`')
    eq([[at(r['cells'], 0), at(r['cells'], 2)] for r in rows(page, 'bill-by-tenant')], cli('tenant'),
       'bill: per tenant as `tessera bill --by tenant`')
    tenant_bars = page.eval_on_selector_all('#bill-tenant-chart rect', '(rs) => rs.map((r) => r.dataset.tenant)')
    eq(tenant_bars, [r[0] for r in cli('tenant')], 'bill: one bar per tenant')
    with page.expect_download() as download:
        page.click('#bill-csv')
    with open(download.value.path(), 'rb') as f:
        csv = f.read().decode('utf-8')
    eq(csv, api('/v1/bill/daily?format=csv', text=True), 'bill: the CSV download is the API\'s CSV')
    shot(page, 'bill')

    # ---- a tenant: bob sees his jobs and bills, not alice's ----
    bctx = browser.new_context(viewport={'width': 1280, 'height': 900})
    bctx.set_default_timeout(60000)
    bp = bctx.new_page()
    bp.goto(base + '/#/queue')
    check(not bp.evaluate("() => sessionStorage.getItem('tessera.token')"), 'a new browser session is not logged in')
    bp.fill('#token', 'tok-bob')
    bp.click('#login-button')
    bp.wait_for_function("() => document.getElementById('main').dataset.page === 'queue'")
    eq(text(bp, '#who'), 'tenant bob', 'logged in as tenant bob')
    bob_ids = sorted(
        int(r['data']['jobId'])
        for r in [*rows(bp, 'queue-running'), *rows(bp, 'queue-waiting'), *rows(bp, 'queue-done')])
    eq(bob_ids, sorted(j['id'] for j in api('/v1/jobs?all=1', 'tok-bob')['jobs']), 'bob: the queue shows his jobs')
    check(train not in bob_ids and big not in bob_ids, 'bob: alice\'s jobs are absent', bob_ids)
    bob_text = text(bp, '#main')
    check('alice' not in bob_text, 'bob: no mention of alice on the queue page',
          [line for line in bob_text.splitlines() if 'alice' in line])
    open_view(bp, '#/bill', 'bill')
    bob_bill = rows(bp, 'bill-rows')
    check(len(bob_bill) > 0 and all(at(r['cells'], 2) == 'bob' for r in bob_bill), 'bob: only his bill rows',
          bob_bill)
    eq(text(bp, '#bill-total'), api('/v1/bill/daily', 'tok-bob')['total'] + ' CNY', 'bob: his total')
    shot(bp, 'tenant-bill')
    open_view(bp, f'#/job/{train}', 'job')
    check(f'job {train} not found' in text(bp, '#main'), 'bob: alice\'s job page says not found')
    shot(bp, 'tenant-job-not-found')


rc = 0
try:
    with sync_playwright() as pw:  # closes the browser it launched when it ends
        try:
            main(pw)
        except Exception:
            print('FAIL ' + traceback.format_exc().rstrip())
            try:
                with open(os.path.join(tmp, 'daemon.log'), errors='replace') as f:
                    print('daemon log tail:\n' + f.read()[-3000:])
            except OSError:
                pass
            rc = 1
finally:
    cleanup()
status = rc or (1 if failures else 0)
print(f'console test FAILED ({failures} check(s) failed; state kept in {tmp})' if status else 'console test passed')
if not status:
    shutil.rmtree(tmp, ignore_errors=True)
sys.exit(status)
