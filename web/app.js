// Tessera console: a static page over the daemon's JSON API (same bearer tokens as the CLI). Everything shown
// comes from the API; nothing is computed here but sums of the rows the API returns and the charts' geometry.
// Pages: #/fleet, #/queue, #/job/ID, #/compliance, #/bill. The token lives in sessionStorage only.
'use strict';

const TOKEN_KEY = 'tessera.token';
const REFRESH_MS = 2000;
const PALETTE = ['#7c3aed', '#0891b2', '#d97706', '#16a34a', '#db2777', '#4b5563'];

// ---- DOM helpers (text only: API strings never become HTML) ----------------------------------------------
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class')
      e.className = v;
    else if (k === 'onclick')
      e.addEventListener('click', v);
    else
      e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
const SVGNS = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
function table(id, headers, rows, numeric) {
  numeric = numeric || [];
  return el(
      'table', {id},
      el('thead', {}, el('tr', {}, headers.map((h, i) => el('th', {class: numeric.includes(i) ? 'num' : null}, h)))),
      el('tbody', {}, rows.map((r) => {
        const cells = r.cells || r;
        return el('tr', r.attrs || {}, cells.map((c, i) => el('td', {class: numeric.includes(i) ? 'num' : null}, c)));
      })));
}
function card(key, value, id) {
  return el('div', {class: 'card'}, el('div', {class: 'k'}, key), el('div', {class: 'v', id}, value));
}
function swatch(color) {
  const s = el('span', {class: 'swatch'});
  s.style.background = color;
  return s;
}
function fmtMs(ms) {
  if (ms === null || ms === undefined) return '-';
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}
// Micro-units to 2 decimals, rounded half away from zero on the integer, as the daemon and the CLI round.
function money(micro) {
  const cents = Math.floor((Math.abs(micro) + 5000) / 10000);
  return (micro < 0 ? '-' : '') + Math.floor(cents / 100) + '.' + String(cents % 100).padStart(2, '0');
}
// A duration as squeue's TIME and `tessera queue`'s ELAPSED: "M:SS", "H:MM:SS" or "D-HH:MM:SS"; '-' for none.
function fmtElapsed(ms) {
  if (ms === null || ms === undefined || ms <= 0) return '-';
  const s = Math.floor(ms / 1000), d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24,
        m = Math.floor(s / 60) % 60, two = (n) => String(n).padStart(2, '0');
  if (d > 0) return d + '-' + two(h) + ':' + two(m) + ':' + two(s % 60);
  if (h > 0) return h + ':' + two(m) + ':' + two(s % 60);
  return m + ':' + two(s % 60);
}
// A queued job's estimated start (as squeue --start): "~TIME" with how it was estimated, or "unknown" and why.
function estStart(j) {
  if (typeof j.estimated_start_ms === 'number')
    return el('span', {title: j.estimated_start || ''}, '~' + fmtMs(j.estimated_start_ms));
  return el('span', {class: 'muted'}, j.estimated_start ? 'unknown: ' + j.estimated_start : '-');
}
function jobLink(id) {
  return el('a', {href: '#/job/' + id, 'data-job-link': id}, '#' + id);
}

// ---- API -----------------------------------------------------------------------------------------------
function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}
async function api(path, opts) {
  const r = await fetch(path, {headers: {Authorization: 'Bearer ' + token()}, cache: 'no-store'});
  if (opts && opts.text) {
    if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
    return r.text();
  }
  const body = await r.json().catch(() => ({error: 'HTTP ' + r.status + ' (not JSON)'}));
  if (!r.ok) throw new Error(body.error || 'HTTP ' + r.status);
  return body;
}

// ---- pages ---------------------------------------------------------------------------------------------
async function pageFleet() {
  const [f, cost] = await Promise.all([api('/v1/fleet'), api('/v1/cost')]);
  const costOf = new Map(cost.by_type.map((t) => [t.type, t.cost_per_hour]));
  const groups = new Map();  // type|zone -> {type, zone, cards, used, free, emulated, sm_share}
  for (const n of f.nodes) {
    const k = n.type + '|' + n.zone;
    const g = groups.get(k) ||
        {type: n.type, zone: n.zone, cards: 0, used: 0, free: 0, emulated: true, sm_share: n.sm_share || 0, nodes: 0};
    g.cards += n.cards;
    g.used += n.used;
    g.free += n.free;
    g.nodes += 1;
    g.emulated = g.emulated && n.emulated;
    g.sm_share = Math.max(g.sm_share, n.sm_share || 0);  // one share per type and zone (the fleet file's rule)
    groups.set(k, g);
  }
  const price = new Map(f.catalog.map((t) => [t.name, t]));
  const totals =
      [...groups.values()].reduce((a, g) => ({cards: a.cards + g.cards, used: a.used + g.used}), {cards: 0, used: 0});
  const busyBar = (used, cards) => {
    const w = 160;
    const u = cards ? Math.round((w * used) / cards) : 0;
    return svg(
        'svg', {width: w, height: 12, class: 'bar', role: 'img', 'aria-label': used + ' of ' + cards + ' busy'},
        svg('rect', {x: 0, y: 0, width: w, height: 12, fill: '#16a34a', opacity: 0.35}),
        svg('rect', {x: 0, y: 0, width: u, height: 12, fill: '#d97706'}));
  };
  // sm_share: cards emulated on that share of a GPU's SMs (0: host ranks).
  const emuTag = (e, share) =>
      (e ? el('span', {class: 'tag emulated'},
              share ? 'emulated (SM share ' + share + '% of a GPU)' : 'emulated (host ranks)') :
           el('span', {class: 'tag'}, 'real'));
  return [
    el('h1', {}, 'Fleet'),
    el('div', {class: 'cards'}, card('cards busy', totals.used + ' / ' + totals.cards, 'fleet-busy'),
       card('cost per hour now', cost.cost_per_hour + ' ' + cost.currency, 'fleet-cost'),
       card('domestic share now', f.share_now || '-', 'fleet-share'),
       card('floor in force today', f.floor_today + ' (' + f.unit + ')', 'fleet-floor'),
       card(
           'compliant',
           f.compliant === undefined ? '-' :
               f.compliant           ? 'yes' :
                                       'NO',
           'fleet-compliant')),
    el('h2', {}, 'Cards per type and zone'),
    table(
        'fleet-groups', ['type', 'zone', 'vendor', 'domestic', 'nodes', 'cards', 'busy', 'free', '', 'emulated'],
        [...groups.values()].map((g) => ({
                                   attrs: {'data-type': g.type, 'data-zone': g.zone},
                                   cells: [
                                     g.type, g.zone, (price.get(g.type) || {}).vendor || '',
                                     (price.get(g.type) || {}).domestic ? 'yes' : 'no', g.nodes, g.cards, g.used,
                                     g.free, busyBar(g.used, g.cards), emuTag(g.emulated, g.sm_share)
                                   ],
                                 })),
        [4, 5, 6, 7]),
    el('h2', {}, 'Nodes'),
    table(
        'fleet-nodes', ['node', 'zone', 'type', 'cards', 'busy', 'free', '', 'emulated'],
        f.nodes.map(
            (n) => ({
              attrs: {'data-node': n.id},
              cells: [
                n.id, n.zone, n.type, n.cards, n.used, n.free, busyBar(n.used, n.cards), emuTag(n.emulated, n.sm_share)
              ]
            })),
        [3, 4, 5]),
    el('h2', {}, 'Catalog (' + f.currency + ', ' + (f.price_version || 'no price version') + ')'),
    table(
        'fleet-catalog', ['type', 'vendor', 'domestic', 'price per card-hour', 'cost per hour now'],
        f.catalog.map(
            (t) => ({
              attrs: {'data-type': t.name},
              cells: [t.name, t.vendor, t.domestic ? 'yes' : 'no', t.price_per_card_hour, costOf.get(t.name) || '0.00']
            })),
        [3, 4]),
    el('p', {class: 'muted'}, 'fleet ' + (f.fleet_source || '(none registered)') + ' · policy ' + f.policy_source),
  ];
}

// " (emulated)", " (emulated, SM share 35% of a GPU)" or "" (as the CLI writes it).
function emulatedNote(o) {
  if (!o.emulated) return '';
  return o.sm_share ? ' (emulated, SM share ' + o.sm_share + '% of a GPU)' : ' (emulated)';
}

function allocText(j) {
  if (!j.allocation || !j.allocation.by_type) return '';
  return j.allocation.by_type.map((t) => t.cards + '× ' + t.type + emulatedNote(t)).join(' + ');
}

async function pageQueue() {
  const [active, all] = await Promise.all([api('/v1/jobs'), api('/v1/jobs?all=1')]);
  const running = active.jobs.filter((j) => j.state === 'running' || j.state === 'stopping');
  const queued =
      active.jobs.filter((j) => j.state === 'queued').sort((a, b) => (a.position || 1e9) - (b.position || 1e9));
  const done = all.jobs.filter((j) => !['running', 'stopping', 'queued'].includes(j.state));
  return [
    el('h1', {}, 'Queue'),
    el('h2', {}, 'Running (' + running.length + ')'),
    table(
        'queue-running', ['job', 'name', 'tenant', 'priority', 'state', 'cards', 'cost/h', 'attempts', 'elapsed', 'ends'],
        running.map((j) => ({
                      attrs: {'data-job-id': j.id},
                      cells: [
                        jobLink(j.id), j.name, j.tenant, j.priority, j.state, allocText(j),
                        j.allocation ? j.allocation.cost_per_hour + ' ' + j.allocation.currency : '', j.attempts,
                        fmtElapsed(j.elapsed_ms), typeof j.estimated_end_ms === 'number' ? '~' + fmtMs(j.estimated_end_ms) : '-'
                      ]
                    })),
        [3, 7, 8]),
    el('h2', {}, 'Waiting (' + queued.length + ')'),
    table(
        'queue-waiting',
        ['position', 'job', 'name', 'tenant', 'priority', 'cards', 'elapsed', 'why it waits (the planner)', 'est. start'],
        queued.map((j) => ({
                     attrs: {'data-job-id': j.id},
                     cells: [
                       j.position === null ? '-' : j.position, jobLink(j.id), j.name, j.tenant, j.priority,
                       j.cards === undefined ? '' : j.cards, fmtElapsed(j.elapsed_ms), j.reason, estStart(j)
                     ]
                   })),
        [0, 4, 5, 6]),
    el('h2', {}, 'Finished (' + done.length + ')'),
    table(
        'queue-done', ['job', 'name', 'tenant', 'state', 'attempts', 'elapsed', 'ended', 'reason'],
        done.map((j) => ({
                   attrs: {'data-job-id': j.id},
                   cells: [
                     jobLink(j.id), j.name, j.tenant, j.state, j.attempts, fmtElapsed(j.elapsed_ms), fmtMs(j.ended_ms),
                     j.reason
                   ]
                 })),
        [4, 5]),
  ];
}

// The loss per step as a line over the steps run so far, with how far the job is (step N of M) and, while it
// runs, its estimated end at the pace so far.
function lossChart(curve, j) {
  const W = 760, H = 220, L = 56, R = 16, T = 14, B = 34;
  const pts = curve.points;
  const last = pts[pts.length - 1][0];
  const xmax = Math.max(last, 1), xmin = Math.min(pts[0][0], xmax - 1);
  let lo = Math.min(...pts.map((p) => p[1])), hi = Math.max(...pts.map((p) => p[1]));
  if (hi <= lo) hi = lo + 1;
  const x = (s) => L + (W - L - R) * (s - xmin) / (xmax - xmin);
  const y = (v) => T + (H - T - B) * (1 - (v - lo) / (hi - lo));
  const g = [svg('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#d8dde2'})];
  for (const f of [0, 0.5, 1]) {
    const v = lo + f * (hi - lo);
    g.push(svg('line', {x1: L, y1: y(v), x2: W - R, y2: y(v), stroke: '#eef1f4'}));
    g.push(svg('text', {x: L - 6, y: y(v) + 4, 'text-anchor': 'end'}, v.toPrecision(3)));
  }
  [xmin, Math.round((xmin + xmax) / 2), xmax].forEach((s, k) => g.push(svg(
      'text', {x: x(s), y: H - B + 16, 'text-anchor': ['start', 'middle', 'end'][k]}, 'step ' + s)));
  g.push(svg('polyline', {
    points: pts.map((p) => x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1)).join(' '),
    fill: 'none',
    stroke: '#7c3aed',
    'stroke-width': 2,
    id: 'job-loss-line',
    'data-points': pts.length
  }));
  const where = 'step ' + last + (curve.of ? ' of ' + curve.of + ' (' + (100 * last / curve.of).toFixed(1) + '%)' : '');
  g.push(svg('text', {x: W - R, y: T + 10, 'text-anchor': 'end', id: 'job-eta'},
             where + (j.estimated_end_ms ? ', ends ~' + fmtMs(j.estimated_end_ms) : '')));
  return svg('svg', {
    class: 'chart', id: 'job-loss-chart', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img',
    'aria-label': 'loss per step'}, g);
}

// The newest checkpoints in a table, the rest counted: a long run keeps the page short.
function checkpointList(ck) {
  const all = ck.checkpoints, newest = all.slice(-5);
  const bytes = all.reduce((n, c) => n + c.bytes, 0);
  return [
    el('p', {id: 'job-checkpoint-summary'},
       all.length ? all.length + ' checkpoint(s), steps ' + all[0].step + ' … ' + all[all.length - 1].step + ', ' +
               (bytes < 1048576 ? (bytes / 1024).toFixed(1) + ' KiB' : (bytes / 1048576).toFixed(1) + ' MiB') +
               ' stored' + (all.length > 5 ? '; the newest 5:' : '') :
                    'no checkpoint yet'),
    table(
        'job-checkpoints', ['step', 'tiers', 'bytes', 'committed'],
        newest.map(
            (c) => ({
              attrs: {'data-step': c.step},
              cells: [c.step, c.tiers.join(', '), c.bytes, c.created_unix ? fmtMs(c.created_unix * 1000) : '-']
            })),
        [0, 2]),
  ];
}

async function pageJob(id) {
  const j = await api('/v1/jobs/' + id);  // first: its error ("not found") is the one to show
  const [ck, log, curve] = await Promise.all([
    api('/v1/jobs/' + id + '/checkpoints'), api('/v1/jobs/' + id + '/logs?tail=6000', {text: true}),
    api('/v1/jobs/' + id + '/progress')
  ]);
  const p = j.progress || {};
  const atts = j.attempts_detail || [];
  return [
    el('h1', {}, 'Job #' + j.id + ' ' + j.name),
    el('div', {class: 'cards'}, card('state', j.state, 'job-state'), card('tenant', j.tenant, 'job-tenant'),
       card('priority', j.priority, 'job-priority'),
       card('progress', p.step === undefined ? '-' : 'step ' + p.step + (p.of ? ' / ' + p.of : ''), 'job-progress'),
       card('loss', p.loss === undefined ? '-' : p.loss, 'job-loss'), card('attempts', j.attempts, 'job-attempts')),
    j.reason ? el('p', {id: 'job-reason'}, j.reason) : null,
    curve.points.length ? lossChart(curve, j) : el('p', {class: 'muted'}, 'no "step N loss L" line in the log yet'),
    j.allocation ? el('p', {},
                      'cards: ' + allocText(j) + ' in zone ' + j.allocation.zone + ', ' + j.allocation.cost_per_hour +
                          ' ' + j.allocation.currency + '/h') :
                   null,
    el('h2', {}, 'Attempts'),
    table(
        'job-attempts-table',
        ['#', 'started', 'ended', 'exit', 'how it ended', 'resumed from', 'wake-up', 'billed', 'islands'],
        atts.map((a) => ({
                   attrs: {'data-attempt': a.n},
                   cells: [
                     a.n, fmtMs(a.started_ms), fmtMs(a.ended_ms),
                     a.exit_signal            ? 'signal ' + a.exit_signal :
                         a.exit_code === null ? '-' :
                                                a.exit_code,
                     a.end_reason || '', a.resume_from || 'fresh start',
                     a.wake_latency_ms === null ? '-' : a.wake_latency_ms + ' ms', a.billed ? 'yes' : 'no',
                     (a.islands || []).map((i) => i.count + '× ' + i.type + emulatedNote(i)).join(' + ') +
                         (a.move ? ' (moved (' + a.move.reason + ') from ' + a.move.from + ': ' +
                                       (a.move.summary || '') + ')' :
                                   '')
                   ]
                 })),
        [0]),
    el('h2', {}, 'Checkpoints'),
    ...checkpointList(ck),
    el('p', {class: 'muted'},
       'hot ' + ck.hot + (ck.warm ? ' · warm ' + ck.warm : '') + (ck.cold ? ' · cold ' + ck.cold : '')),
    ck.warning ? el('p', {class: 'bad'}, ck.warning) : null,
    el('h2', {}, 'Events'),
    table('job-events', ['at', 'event'], (j.events || []).map((e) => [fmtMs(e.at_ms), e.text])),
    el('h2', {}, 'Log (tail, live)'),
    el('pre', {class: 'log', id: 'job-log'}, log),
  ];
}

// A bar per day: the domestic share, the floor as a step line, days below the floor in red.
function complianceChart(days) {
  const W = 760, H = 240, L = 44, R = 10, T = 14, B = 40;
  const n = days.length, bw = (W - L - R) / n;
  const y = (ppm) => T + (H - T - B) * (1 - ppm / 1e6);
  const g = [svg('line', {x1: L, y1: y(0), x2: W - R, y2: y(0), stroke: '#d8dde2'})];
  for (const p of [0, 25, 50, 75, 100]) {
    g.push(svg('line', {x1: L, y1: y(p * 1e4), x2: W - R, y2: y(p * 1e4), stroke: '#eef1f4'}));
    g.push(svg('text', {x: L - 6, y: y(p * 1e4) + 4, 'text-anchor': 'end'}, p + '%'));
  }
  days.forEach((d, i) => {
    const x = L + i * bw;
    if (d.used) {
      const below = !d.compliant;
      const h = Math.max(2, y(0) - y(d.share_ppm));  // a day at 0% still shows a sliver
      g.push(
          svg('rect', {
            x: x + bw * 0.15,
            y: y(0) - h,
            width: bw * 0.7,
            height: h,
            fill: below ? '#dc2626' : '#7c3aed',
            'data-day': d.day,
            class: below ? 'below' : 'ok'
          },
              svg('title', {}, d.day + ': ' + d.share + ' against a floor of ' + d.floor)));
      if (below)
        g.push(svg('text', {x: x + bw / 2, y: y(d.share_ppm) - 4, 'text-anchor': 'middle', fill: '#dc2626'}, '▼'));
    } else {
      g.push(svg('text', {x: x + bw / 2, y: y(0) - 4, 'text-anchor': 'middle'}, '·'));
    }
    g.push(svg('line', {
      x1: x,
      y1: y(d.floor_ppm),
      x2: x + bw,
      y2: y(d.floor_ppm),
      stroke: '#111827',
      'stroke-width': 2,
      'stroke-dasharray': '5,3',
      class: 'floor'
    }));
    if (i % Math.ceil(n / 14) === 0 || i === n - 1)
      g.push(svg('text', {x: x + bw / 2, y: H - B + 14, 'text-anchor': 'middle'}, d.day.slice(5)));
  });
  return svg(
      'svg', {
        class: 'chart',
        id: 'compliance-chart',
        width: W,
        height: H,
        viewBox: '0 0 ' + W + ' ' + H,
        role: 'img',
        'aria-label': 'domestic share per day against the floor'
      },
      g);
}

async function pageCompliance(days) {
  const n = Math.min(366, Math.max(1, Number(days) || 14));
  const c = await api('/v1/compliance?days=' + n);
  const below = c.days.filter((d) => d.used && !d.compliant);
  return [
    el('h1', {}, 'Compliance: the domestic share'),
    el('div', {class: 'cards'}, card('share now (running jobs)', c.share_now || '-', 'compliance-share-now'),
       card('floor in force today', c.floor_today, 'compliance-floor-today'), card('unit', c.unit, 'compliance-unit'),
       card('days below the floor (' + n + ' d)', String(below.length), 'compliance-below')),
    el('p', {class: 'muted'}, 'last ',
       [7, 14, 30,
        90].map((d) => [d === n ? el('b', {}, d + ' days') : el('a', {href: '#/compliance/' + d}, d + ' days'), ' ']),
       '(UTC days; the ledger bills an attempt when it ends)'),
    complianceChart(c.days),
    el('p', {class: 'legend'}, el('span', {}, swatch('#7c3aed'), 'share of the day (compliant)'),
       el('span', {}, swatch('#dc2626'), 'below the floor'),
       el('span', {}, '- - floor in force that day (policy calendar)'), el('span', {}, '· no usage')),
    el('h2', {}, 'Per day'),
    table(
        'compliance-days', ['day', 'domestic share', 'floor', 'compliant', 'domestic card-h', 'total card-h'],
        c.days.slice().reverse().map(
            (d) => ({
              attrs: {'data-day': d.day, class: d.used && !d.compliant ? 'bad' : null},
              cells: [
                d.day, d.used ? d.share : 'no usage', d.floor, d.used ? (d.compliant ? 'yes' : 'NO') : '-',
                (d.domestic_card_seconds / 3600).toFixed(4), (d.total_card_seconds / 3600).toFixed(4)
              ]
            })),
        [4, 5]),
    el('h2', {}, 'Floor calendar (' + c.policy_source + ')'),
    c.calendar.length ? table(
                            'compliance-calendar', ['from', 'floor'],
                            c.calendar.map((f) => [f.from === null ? 'always' : f.from, f.floor])) :
                        el('p', {class: 'muted'}, 'no floor'),
  ];
}

// Stacked bars per day, one colour per type.
function billChart(rows, types) {
  const days = [...new Set(rows.map((r) => r.day))].sort();
  const W = 760, H = 220, L = 60, R = 10, T = 10, B = 30;
  const per = new Map();
  for (const r of rows) per.set(r.day + '|' + r.type, (per.get(r.day + '|' + r.type) || 0) + r.amount_micro);
  const max = Math.max(1, ...days.map((d) => types.reduce((a, t) => a + (per.get(d + '|' + t) || 0), 0)));
  const bw = (W - L - R) / Math.max(1, days.length);
  const y = (v) => T + (H - T - B) * (1 - v / max);
  const g = [
    svg('line', {x1: L, y1: y(0), x2: W - R, y2: y(0), stroke: '#d8dde2'}),
    svg('text', {x: L - 6, y: y(max) + 4, 'text-anchor': 'end'}, money(max)),
    svg('text', {x: L - 6, y: y(0) + 4, 'text-anchor': 'end'}, '0')
  ];
  days.forEach((d, i) => {
    let acc = 0;
    types.forEach((t, k) => {
      const v = per.get(d + '|' + t) || 0;
      if (!v) return;
      g.push(
          svg('rect', {
            x: L + i * bw + bw * 0.2,
            y: y(acc + v),
            width: bw * 0.6,
            height: y(acc) - y(acc + v),
            fill: PALETTE[k % PALETTE.length],
            'data-day': d,
            'data-type': t
          },
              svg('title', {}, d + ' ' + t + ': ' + money(v))));
      acc += v;
    });
    g.push(svg('text', {x: L + i * bw + bw / 2, y: H - B + 14, 'text-anchor': 'middle'}, d));
  });
  return svg(
      'svg', {
        class: 'chart',
        id: 'bill-chart',
        width: W,
        height: H,
        viewBox: '0 0 ' + W + ' ' + H,
        role: 'img',
        'aria-label': 'amount per day and type'
      },
      g);
}

// One horizontal bar per tenant: its amount.
function tenantChart(totals) {
  const W = 760, row = 22, L = 120, R = 90, H = Math.max(1, totals.length) * row + 10;
  const max = Math.max(1, ...totals.map(([, e]) => e.micro));
  const g = [];
  totals.forEach(([t, e], i) => {
    const y = 5 + i * row, w = ((W - L - R) * e.micro) / max;
    g.push(svg('text', {x: L - 8, y: y + 14, 'text-anchor': 'end'}, t));
    g.push(
        svg('rect', {x: L, y: y + 3, width: Math.max(1, w), height: row - 8, fill: '#0891b2', 'data-tenant': t},
            svg('title', {}, t + ': ' + money(e.micro))));
    g.push(svg('text', {x: L + w + 6, y: y + 14}, money(e.micro)));
  });
  return svg(
      'svg', {
        class: 'chart',
        id: 'bill-tenant-chart',
        width: W,
        height: H,
        viewBox: '0 0 ' + W + ' ' + H,
        role: 'img',
        'aria-label': 'amount per tenant'
      },
      g);
}

async function pageBill() {
  const b = await api('/v1/bill/daily');
  const types = [...new Set(b.rows.map((r) => r.type))].sort();
  const sum = (key) => {
    const m = new Map();
    for (const r of b.rows) {
      const e = m.get(r[key]) || {cs: 0, micro: 0};
      e.cs += r.card_seconds;
      e.micro += r.amount_micro;
      m.set(r[key], e);
    }
    return [...m.entries()].sort();
  };
  const download = async () => {
    const text = await api('/v1/bill/daily?format=csv', {text: true});
    const a = el('a', {href: URL.createObjectURL(new Blob([text], {type: 'text/csv'})), download: 'tessera-bill.csv'});
    document.body.appendChild(a);
    a.click();
    a.remove();
  };
  return [
    el('h1', {}, 'Bill (' + b.scope + ')'),
    el('div', {class: 'cards'}, card('total', b.total + ' ' + b.currency, 'bill-total')),
    billChart(b.rows, types),
    el('p', {class: 'legend'}, types.map((t, k) => el('span', {}, swatch(PALETTE[k % PALETTE.length]), t))),
    el('p', {}, el('button', {id: 'bill-csv', type: 'button', onclick: download}, 'Download CSV')),
    el('h2', {}, 'Per type'),
    table(
        'bill-by-type', ['type', 'card-hours', 'amount ' + b.currency],
        sum('type').map(([k, e]) => ({attrs: {'data-type': k}, cells: [k, (e.cs / 3600).toFixed(2), money(e.micro)]})),
        [1, 2]),
    el('h2', {}, 'Per tenant'),
    tenantChart(sum('tenant')),
    table(
        'bill-by-tenant', ['tenant', 'card-hours', 'amount ' + b.currency],
        sum('tenant').map(
            ([k, e]) => ({attrs: {'data-tenant': k}, cells: [k, (e.cs / 3600).toFixed(2), money(e.micro)]})),
        [1, 2]),
    el('h2', {}, 'Per day, type and tenant'),
    table(
        'bill-rows', ['day', 'type', 'tenant', 'card-seconds', 'amount ' + b.currency],
        b.rows.map((r) => ({
                     attrs: {'data-day': r.day, 'data-type': r.type, 'data-tenant': r.tenant},
                     cells: [r.day, r.type, r.tenant, r.card_seconds, r.amount]
                   })),
        [3, 4]),
  ];
}

// ---- router and session --------------------------------------------------------------------------------
let timer = null;
let rendering = false;

async function render() {
  if (rendering) return;
  rendering = true;
  const main = document.getElementById('main');
  const status = document.getElementById('status');
  const hash = location.hash || '#/fleet';
  const m = hash.match(/^#\/(\w+)(?:\/(\d+))?/);
  const page = m ? m[1] : 'fleet';
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === page);
  try {
    if (!token()) return;
    let nodes;
    if (page === 'queue')
      nodes = await pageQueue();
    else if (page === 'job' && m[2])
      nodes = await pageJob(m[2]);
    else if (page === 'compliance')
      nodes = await pageCompliance(m[2]);
    else if (page === 'bill')
      nodes = await pageBill();
    else
      nodes = await pageFleet();
    const logBefore = document.getElementById('job-log');
    const stick = logBefore && logBefore.scrollTop + logBefore.clientHeight >= logBefore.scrollHeight - 4;
    main.replaceChildren(...nodes.filter(Boolean));
    main.dataset.page = page;
    main.dataset.view = hash;
    main.dataset.loaded = String(Date.now());
    const log = document.getElementById('job-log');
    if (log && (stick || !logBefore)) log.scrollTop = log.scrollHeight;
    status.textContent = 'updated ' + new Date().toISOString().slice(11, 19) + ' UTC from ' + location.host;
  } catch (e) {
    main.replaceChildren(el('p', {class: 'error', id: 'error'}, String(e.message || e)));
    main.dataset.page = 'error';
    main.dataset.view = hash;
    main.dataset.loaded = String(Date.now());
  } finally {
    rendering = false;
  }
}

async function login(t) {
  sessionStorage.setItem(TOKEN_KEY, t);
  const who = document.getElementById('who');
  try {
    const w = await api('/v1/whoami');
    who.textContent = w.admin ? 'admin (all tenants)' : 'tenant ' + w.tenant;
    who.dataset.tenant = w.tenant;
  } catch (e) {
    sessionStorage.removeItem(TOKEN_KEY);
    who.textContent = 'login failed: ' + e.message;
    delete who.dataset.tenant;
    document.getElementById('main').replaceChildren(el('p', {class: 'error', id: 'error'}, who.textContent));
    return;
  }
  await render();
}

function start() {
  document.getElementById('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = document.getElementById('token');
    login(input.value.trim());
    input.value = '';
  });
  document.getElementById('logout-button').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
  });
  window.addEventListener('hashchange', render);
  if (token()) login(token());
  timer = setInterval(render, REFRESH_MS);
}

document.addEventListener('DOMContentLoaded', start);
