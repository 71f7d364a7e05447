"""The block walk's browser side (picaso_core.ui.tabs.primer_block): a gr.HTML whose js_on_load draws
the walk's precomputed numbers (picaso_core.lab.block_walk.walk) with the page's plotly.js and steps
through them in the page: Step / Play / Pause, a pace, the token slider and "difference to zeros"
never ask the server anything. Each draw is one Plotly.react of eight panels; the time from a
click to the stage drawn is kept in window.__bwTimes (tests/ui/browser/test_browser_block_walk.py).

The template is static (the walk comes in as the component's value, read by `watch`), so Gradio
never re-renders the markup under the figure.
"""

TEMPLATE = """
<div class="bw-root">
  <div class="bw-bar">
    <button id="bw-back" class="bw-btn" title="the stage before">&#9664; Step</button>
    <button id="bw-step" class="bw-btn bw-main" title="the next stage">Step &#9654;</button>
    <button id="bw-play" class="bw-btn">&#9654; Play</button>
    <button id="bw-pause" class="bw-btn">&#10074;&#10074; Pause</button>
    <label>by <select id="bw-mode"><option value="stage">stage</option><option value="token">token</option></select></label>
    <label>pace <select id="bw-pace"><option value="250">0.25 s</option><option value="500">0.5 s</option>
      <option value="1000" selected>1 s</option><option value="2000">2 s</option><option value="3000">3 s</option></select></label>
    <label class="bw-tok">token <input id="bw-token" type="range" min="0" max="0" value="0" step="1"></label>
    <label title="the state minus the state the same text reaches from zeros"><input id="bw-diff" type="checkbox">
      difference to zeros</label>
  </div>
  <div id="bw-caption" class="bw-caption">The walk appears here once it is computed.</div>
  <div class="bw-plotbox"><div id="bw-plot" class="bw-plot"></div></div>
</div>
"""

CSS = """
.bw-bar {display:flex; flex-wrap:wrap; gap:6px 12px; align-items:center; margin:2px 0 6px}
.bw-btn {padding:3px 10px; border-radius:6px; border:1px solid var(--border-color-primary);
  background:var(--button-secondary-background-fill); color:var(--body-text-color); cursor:pointer; font-size:var(--text-md)}
.bw-main {background:var(--button-primary-background-fill); color:var(--button-primary-text-color)}
.bw-bar label {display:flex; gap:4px; align-items:center; font-size:var(--text-md); color:var(--body-text-color)}
.bw-bar select {background:var(--input-background-fill); color:var(--body-text-color); border-radius:4px}
.bw-tok input {width:180px}
.bw-caption {min-height:3.6em; padding:4px 8px; border-left:4px solid var(--color-accent); font-size:var(--text-md);
  color:var(--body-text-color); background:var(--block-background-fill)}
.bw-caption b {color:var(--color-accent)}
.bw-plot {width:100%; min-height:480px}
.bw-plotbox {position:relative}
.bw-hl {position:absolute; border:3px solid #f97316; border-radius:6px; pointer-events:none; transition:all 0.15s}
.bw-bar select {height:auto !important; width:auto !important; padding:1px 4px !important; font-size:var(--text-md)}
"""

JS = r"""
const $ = (id) => element.querySelector('#' + id);
const S = {w: null, d: {}, t: 0, s: 0, timer: null, t0: null};
window.__bwTimes = window.__bwTimes || [];
const STAGES = {
  Mamba2: [
    ['norm', 'RMSNorm', 'The block reads the residual stream u (D numbers per token) and rescales it to unit RMS, times a learned weight: u′ = norm(u).'],
    ['in_proj', 'in_proj: z, x, B, C, Δ', 'One linear map turns u′ into all the mixer needs: the gate z, the input x (H heads × P), B and C (N per group) and a raw step Δ per head.'],
    ['conv', 'the causal conv window', 'A depthwise conv over the last K inputs (K−1 kept from before, the small part of the state, plus this token) mixes each channel of x, B, C in time, then SiLU.'],
    ['dt', 'Δ and the decay a = exp(Δ·A)', 'Δ = softplus(raw Δ + bias) is this token’s step. With A < 0, a = exp(Δ·A) is the share of its state a head keeps: near 1 it remembers, near 0 it forgets.'],
    ['state', 'the state update h ← a·h + Δ·x·Bᵀ', 'The old state decays (left), the token writes the outer product Δ·x·Bᵀ (middle), their sum is the new state h (right): P × N numbers per head, what PICASO stores and composes.'],
    ['readout', 'read-out y = h·C + D·x', 'C chooses what to read from the state; D·x is a skip that bypasses it.'],
    ['gate', 'gate: norm(y·SiLU(z))', 'z, from in_proj, gates each channel: y·SiLU(z), normalised per group (Mamba-2’s gated RMSNorm).'],
    ['out', 'out_proj and the residual', 'out_proj maps the E channels back to D numbers, added to the block’s input: u + out is the next block’s input.']],
  Mamba1: [
    ['norm', 'RMSNorm', 'The block reads the residual stream u (D numbers per token) and rescales it to unit RMS, times a learned weight: u′ = norm(u).'],
    ['in_proj', 'in_proj: x, z; x_proj: Δ, B, C', 'in_proj gives the input x and the gate z (E channels each); after the conv, x_proj gives a low-rank raw Δ per channel (dt_proj) and B, C (N each).'],
    ['conv', 'the causal conv window', 'A depthwise conv over the last K inputs (K−1 kept from before, the small part of the state, plus this token) mixes each channel of x in time, then SiLU.'],
    ['dt', 'Δ and the decay a = exp(Δ·A)', 'Δ = softplus(dt_proj(·)) per channel. A is E × N: every channel decays each of its N state numbers at its own rate a = exp(Δ·A).'],
    ['state', 'the state update h ← a·h + Δ·x·Bᵀ', 'Each channel’s state [N] decays (left), the token writes Δ·x·B (middle), their sum is the new state (right); rows are channels, PICASO composes all of them.'],
    ['readout', 'read-out y = h·C + D·x', 'C chooses what to read from each channel’s state; D·x is a skip that bypasses it.'],
    ['gate', 'gate: y·SiLU(z)', 'z, from in_proj, gates each channel: y·SiLU(z).'],
    ['out', 'out_proj and the residual', 'out_proj maps the E channels back to D numbers, added to the block’s input: u + out is the next block’s input.']]};
const PANEL = {norm: 'A', in_proj: 'B', conv: 'C', dt: 'D', state: 'E', readout: 'F', gate: 'F', out: 'A'};
const DOM = {A: [[0, 0.2], [0.6, 1]], B: [[0.25, 0.45], [0.6, 1]], C: [[0.565, 0.72], [0.6, 1]], D: [[0.8, 1], [0.6, 1]],
  E: [[0, 0.68], [0, 0.35]], F: [[0.77, 1], [0, 0.35]]};
const dark = () => document.body.classList.contains('dark') || document.documentElement.classList.contains('dark')
  || !!document.querySelector('gradio-app.dark, .gradio-container.dark');
const DIV = () => [[0, '#2166ac'], [0.25, '#67a9cf'], [0.5, dark() ? '#1e293b' : '#f7f7f7'], [0.75, '#ef8a62'], [1, '#b2182b']];
const half = (h) => {
  const e = (h >> 10) & 31, f = h & 1023, s = h & 32768 ? -1 : 1;
  return e === 0 ? s * f * 5.960464477539063e-8 : e === 31 ? (f ? NaN : s * Infinity) : s * Math.pow(2, e - 15) * (1 + f / 1024);
};
const unpack = (p) => {
  const bin = atob(p.f16), n = bin.length >> 1, a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = half(bin.charCodeAt(2 * i) | (bin.charCodeAt(2 * i + 1) << 8));
  return {shape: p.shape, a};
};
const row = (u, i) => { const c = u.shape.slice(1).reduce((x, y) => x * y, 1); return Array.from(u.a.subarray(i * c, (i + 1) * c)); };
const mat = (u, i) => { const [R, C] = u.shape.slice(1), r = row(u, i); return Array.from({length: R}, (_, k) => r.slice(k * C, (k + 1) * C)); };
// a colour range that a few outliers do not wash out: the 99.5th percentile of |value| (hover keeps the numbers)
const range = (a) => { const v = Float32Array.from(a, Math.abs).sort(); return Math.max(v[Math.floor(0.995 * (v.length - 1))] || 0, 1e-12); };
const rms = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0) / Math.max(v.length, 1));
const fro = (m) => Math.sqrt(m.flat().reduce((s, x) => s + x * x, 0));
const g = (x, n = 3) => Number(x).toPrecision(n);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]));

function load(w) {
  S.w = w; S.d = {}; S.t = 0; S.s = 0; S.layout = null;
  if (!w || !w.h) return;
  for (const [k, v] of Object.entries(w)) if (v && v.f16 !== undefined) S.d[k] = unpack(v);
  S.max = {h: range(S.d.h.a), win: Math.max(range(S.d.win.a), range(S.d.conv.a))};
  const d = S.d, T = w.T, P = w.dims.P, N = w.dims.N;
  const add = new Float32Array(T * P * N);  // every write Δ·x·Bᵀ of the walk: the middle panel's fixed colour range
  for (let t = 0; t < T; t++) for (let p = 0; p < P; p++) {
    const dx = dtOf(t, p) * d.x.a[t * P + p];
    for (let n = 0; n < N; n++) add[(t * P + p) * N + n] = dx * d.B.a[t * N + n];
  }
  S.max.add = range(add);
  if (d.h_zero) S.max.diff = range(d.h.a.map((v, i) => v - d.h_zero.a[i]));
  $('bw-token').max = T - 1; $('bw-diff').disabled = !d.h_zero; if (!d.h_zero) $('bw-diff').checked = false;
}
const dtOf = (t, p) => S.w.family === 'Mamba2' ? S.d.dt_all.a[t * S.w.dims.H + S.w.head] : S.d.dt_all.a[t * S.w.dims.P + p];
const decayOf = (t, p, n) => S.w.family === 'Mamba2' ? S.d.decay_all.a[t * S.w.dims.H + S.w.head]
  : S.d.decay_all.a[(t * S.w.dims.P + p) * S.w.dims.N + n];

function traces(t) {
  const w = S.w, d = S.d, P = w.dims.P, N = w.dims.N, K = w.K, fam = w.family, diff = $('bw-diff').checked;
  const hb = mat(d.h, t), ha = mat(d.h, t + 1), x = row(d.x, t), B = row(d.B, t);
  const kept = hb.map((r, p) => r.map((v, n) => decayOf(t, p, n) * v));
  const added = x.map((xp, p) => B.map((b) => dtOf(t, p) * xp * b));
  const state = diff ? ha.map((r, p) => r.map((v, n) => v - d.h_zero.a[((t + 1) * P + p) * N + n])) : ha;
  const rows = [row(d.resid_in, t), row(d.normed, t), row(d.out, t)];
  rows.push(rows[0].map((v, i) => v + rows[2][i]));
  const rmax = rows.map((r) => Math.max(...r.map(Math.abs), 1e-12));
  const unit = (ax) => ({xaxis: 'x' + ax, yaxis: 'y' + ax});
  const hm = (z, ax, extra) => Object.assign({type: 'heatmap', z, ...unit(ax), hovertemplate: '%{y}, %{x}: %{z:.4g}<extra></extra>'}, extra);
  const tokLab = (i) => i < 0 ? 'carried' : (w.tokens[i] || '').slice(0, 8);
  const winRows = Array.from({length: K}, (_, j) => row(d.win, t + j));
  const parts = fam === 'Mamba2' ? [['x', x], ['z', row(d.z, t)], ['B', B], ['C', row(d.C, t)], ['Δ raw', row(d.dt_raw, t)]]
    : [['x', x], ['z', row(d.z, t)], ['Δ raw', row(d.dt_raw, t)], ['B', B], ['C', row(d.C, t)]];
  let off = 0;
  S.parts = [];
  const bars = parts.map(([name, v]) => { const xs = v.map((_, i) => off + i); S.parts.push([name, off + (v.length - 1) / 2]);
    off += v.length + 2;
    return {type: 'bar', name, x: xs, y: v, ...unit(2), showlegend: false, hovertemplate: name + ' %{customdata}: %{y:.4g}<extra></extra>',
      customdata: v.map((_, i) => i)}; });
  const out = [
    hm(rows.map((r, i) => r.map((v) => v / rmax[i])), '', {y: ['u', 'norm(u)', 'out', 'u + out'], zmin: -1, zmax: 1,
      colorscale: DIV(), customdata: rows, hovertemplate: '%{y}[%{x}] = %{customdata:.4g}<extra></extra>',
      showscale: false}),  // rows scaled to their own range: the hover gives the numbers
    ...bars,
    hm([...winRows, row(d.conv, t)], 3, {y: [...Array.from({length: K}, (_, j) => `${j - K + 1 || 't'} ${tokLab(t + j - K + 1)}`), '→ SiLU(conv)'],
      zmin: -S.max.win, zmax: S.max.win, colorscale: DIV(),
      colorbar: {x: 0.725, len: 0.4, y: 0.8, thickness: 9}}),
    fam === 'Mamba2'
      ? {type: 'bar', x: Array.from({length: w.dims.H}, (_, i) => i), y: row(d.decay_all, t), ...unit(4), showlegend: false,
         marker: {color: Array.from({length: w.dims.H}, (_, i) => i === w.head ? '#f97316' : '#60a5fa')},
         customdata: row(d.dt_all, t), hovertemplate: 'head %{x}: a = %{y:.4f}, Δ = %{customdata:.4g}<extra></extra>'}
      : hm(mat(d.decay_all, t), 4, {zmin: 0, zmax: 1, colorscale: 'Viridis', colorbar: {x: 1.01, len: 0.4, y: 0.8, thickness: 9}}),
    hm(kept, 5, {coloraxis: 'coloraxis'}), hm(added, 6, {coloraxis: 'coloraxis2'}),
    hm(state, 7, {coloraxis: diff ? 'coloraxis3' : 'coloraxis'}),
    ...[['h·C', row(d.y_scan, t)], ['h·C + D·x', row(d.y, t)], [fam === 'Mamba2' ? 'norm(y·SiLU(z))' : 'y·SiLU(z)', row(d.gated, t)]]
      .map(([name, v], i) => ({type: 'scatter', mode: 'lines+markers', name, y: v, ...unit(8), marker: {size: 4},
        line: {width: 1.5, color: ['#94a3b8', '#2563eb', '#f97316'][i]}}))];
  return {out, kept, added, state, ha, x, rows};
}

function layout() {  // one per walk (and diff setting): a step changes the data alone (datarevision)
  const w = S.w, fam = w.family, diff = $('bw-diff').checked, H = 480;
  const L = {height: H, margin: {l: 64, r: 24, t: 30, b: 44}, showlegend: true, bargap: 0.05, datarevision: 0,
    legend: {orientation: 'h', x: 0.77, y: -0.1, xanchor: 'left', yanchor: 'top', font: {size: 11}},
    coloraxis: {colorscale: DIV(), cmin: -S.max.h, cmax: S.max.h,
      colorbar: {x: 0.685, len: 0.35, y: 0.175, thickness: 9, title: {text: 'h', side: 'right'}}},
    coloraxis2: {colorscale: [[0, '#5e3c99'], [0.25, '#b2abd2'], [0.5, dark() ? '#1e293b' : '#f7f7f7'], [0.75, '#fdb863'], [1, '#e66101']], cmin: -S.max.add, cmax: S.max.add, colorbar: {x: 0.44, len: 0.35, y: 0.175, thickness: 9}},
    coloraxis3: {colorscale: 'PiYG', cmin: -(S.max.diff || 1), cmax: S.max.diff || 1, showscale: diff,
      colorbar: {x: 0.735, len: 0.35, y: 0.175, thickness: 9, title: {text: 'Δh', side: 'right'}}},
    annotations: []};
  const ax = (k, dx, dy, xt, yt, extra = {}) => {
    L['xaxis' + k] = Object.assign({domain: dx, anchor: 'y' + k, title: {text: xt, standoff: 2}, automargin: false}, extra.x || {});
    L['yaxis' + k] = Object.assign({domain: dy, anchor: 'x' + k, title: {text: yt, standoff: 2}, automargin: false}, extra.y || {});
  };
  const unit = fam === 'Mamba2' ? 'p' : 'channel';
  ax('', DOM.A[0], DOM.A[1], 'dimension of D', '', {y: {autorange: 'reversed'}});
  ax(2, DOM.B[0], DOM.B[1], '', '', {x: {tickvals: S.parts.map((p) => p[1]), ticktext: S.parts.map((p) => p[0]), ticks: ''}});
  ax(3, DOM.C[0], DOM.C[1], fam === 'Mamba2' ? 'channel: x | B | C' : 'channel', '', {y: {autorange: 'reversed'}});
  ax(4, DOM.D[0], DOM.D[1], fam === 'Mamba2' ? 'head' : 'n', fam === 'Mamba2' ? '' : 'channel',
    fam === 'Mamba2' ? {y: {range: [0, 1.02]}} : {y: {autorange: 'reversed'}});
  const e = [[0, 0.19], [0.245, 0.435], [0.49, 0.68]];
  [5, 6, 7].forEach((k, i) => ax(k, e[i], DOM.E[1], 'n (state dim N)', i ? '' : unit, {y: {autorange: 'reversed', showticklabels: !i}}));
  ax(8, DOM.F[0], DOM.F[1], unit, '');
  const head = fam === 'Mamba2' ? `head ${w.head}` : `channels ${w.channels[0]}–${w.channels[1]}`;
  [[0.1, 1, '1 · 8 residual stream'], [0.35, 1, `2 · in_proj, ${head}`], [0.64, 1, '3 · conv window'],
    [0.9, 1, fam === 'Mamba2' ? '4 · decay a per head' : '4 · decay a (channel × n)'], [0.095, 0.36, '5 · a·h (kept)'],
    [0.34, 0.36, '+ Δ·x·Bᵀ (written)'], [0.585, 0.36, diff ? '= h − h(zeros)' : '= h (the new state)'],
    [0.885, 0.36, '6 · 7 read-out, gate']].forEach(([x, y, text]) => L.annotations.push({text, x, y, xref: 'paper',
    yref: 'paper', xanchor: 'center', yanchor: 'bottom', showarrow: false, font: {size: 13}}));
  return L;
}

function highlight(gd, s) {  // the stage's panel framed: a box over the figure, so that a step redraws no layout
  const fl = gd._fullLayout;
  if (!fl || !fl._size) return;
  let box = gd.parentElement.querySelector('.bw-hl');
  if (!box) { box = document.createElement('div'); box.className = 'bw-hl'; gd.parentElement.appendChild(box); }
  const key = STAGES[S.w.family][s][0], [dx, dy] = DOM[PANEL[key]], z = fl._size;
  const rows = key === 'norm' ? [0, 0.5] : key === 'out' ? [0.5, 1] : [0, 1];  // rows u, norm(u) / out, u + out
  const y0 = dy[1] - (dy[1] - dy[0]) * rows[0], y1 = dy[1] - (dy[1] - dy[0]) * rows[1];
  const left = gd.offsetLeft + z.l + dx[0] * z.w - 6, top = gd.offsetTop + z.t + (1 - y0) * z.h - (rows[0] ? 4 : 22);
  Object.assign(box.style, {left: left + 'px', top: top + 'px', width: (dx[1] - dx[0]) * z.w + 12 + 'px',
    height: (y0 - y1) * z.h + (rows[0] ? 8 : 26) + (rows[1] === 1 ? 30 : 4) + 'px'});
}

function caption(t, s, tr) {
  const w = S.w, d = S.d, [key, title, say] = STAGES[w.family][s], P = w.dims.P;
  const tok = esc(w.tokens[t] || '');
  let num = '';
  if (key === 'norm') num = `RMS of u ${g(rms(tr.rows[0]))} → RMS of norm(u) ${g(rms(tr.rows[1]))}.`;
  else if (key === 'in_proj') num = `x of this head: ${g(Math.min(...tr.x))} … ${g(Math.max(...tr.x))}; raw Δ ${g(row(d.dt_raw, t)[0], 4)}.`;
  else if (key === 'conv') num = `Window: the ${w.K} inputs of tokens ${Math.max(1, t + 2 - w.K)}–${t + 1} (earlier ones carried in the state).`;
  else if (key === 'dt' && w.family === 'Mamba2') {
    const a = decayOf(t, 0, 0);
    num = `Δ = ${g(dtOf(t, 0), 4)}, A = ${g(w.A, 4)}: a = exp(Δ·A) = <b>${a.toFixed(4)}</b>, the head keeps ${(100 * a).toFixed(1)}% of its state.`;
  } else if (key === 'dt') {
    const a = mat(d.decay_all, t).flat();
    num = `a ranges ${Math.min(...a).toFixed(3)} … ${Math.max(...a).toFixed(3)} over these channels × n.`;
  } else if (key === 'state') num = `|a·h| = ${g(fro(tr.kept))}, |Δ·x·Bᵀ| = ${g(fro(tr.added))}, |h| = <b>${g(fro(tr.ha))}</b>` +
    ($('bw-diff').checked ? `; |h − h(zeros)| = <b>${g(fro(tr.state))}</b>: what the start state still adds.` : '.');
  else if (key === 'readout') num = `|h·C| = ${g(rms(row(d.y_scan, t)))} RMS, with D·x ${g(rms(row(d.y, t)))} RMS (D = ${g(w.Dskip[0])}${P > 1 && w.family === 'Mamba1' ? ', …' : ''}).`;
  else if (key === 'gate') num = `RMS before the gate ${g(rms(row(d.y, t)))}, after ${g(rms(row(d.gated, t)))}.`;
  else num = `RMS of out ${g(rms(tr.rows[2]))}; u + out, the next block’s input: RMS ${g(rms(tr.rows[3]))}.`;
  return `Token <b>${t + 1}</b> of ${w.T} “${tok}” · stage <b>${s + 1}</b> of 8: <b>${title}</b> — ${say}<br><small>${num}</small>`;
}

function draw() {
  const P = window.Plotly, gd = $('bw-plot');
  if (!S.w || !S.w.h) return;
  if (!P) { setTimeout(draw, 100); return; }
  const t = S.t, s = S.s, tr = traces(t), t0 = S.t0;
  S.t0 = null;
  $('bw-caption').innerHTML = caption(t, s, tr);
  $('bw-token').value = t;
  if (!S.layout) S.layout = layout();
  S.layout.datarevision += 1;
  Promise.resolve(P.react(gd, tr.out, S.layout, {displaylogo: false, responsive: true})).then(() => {
    highlight(gd, s);
    Object.assign(gd.dataset, {token: t, stage: s, stageName: STAGES[S.w.family][s][0], layer: S.w.layer,
      head: S.w.head, start: S.w.start || 'zeros'});
    if (t0 !== null) window.__bwTimes.push(performance.now() - t0);
  });
}
const go = (dt) => {  // one stage forward or back; past the last stage, the next token
  const n = 8, i = Math.min(Math.max(S.t * n + S.s + dt, 0), S.w.T * n - 1);
  S.t = Math.floor(i / n); S.s = i % n; draw();
};
const stop = () => { clearInterval(S.timer); S.timer = null; };
const play = () => {
  stop();
  S.timer = setInterval(() => {
    const token = $('bw-mode').value === 'token', last = S.t === S.w.T - 1 && (token || S.s === 7);
    if (last) { stop(); return; }
    if (token) { S.t += 1; S.s = 4; S.t0 = performance.now(); draw(); } else { S.t0 = performance.now(); go(1); }
  }, Number($('bw-pace').value));
};
$('bw-step').addEventListener('click', () => { if (!S.w) return; stop(); S.t0 = performance.now(); go(1); });
$('bw-back').addEventListener('click', () => { if (!S.w) return; stop(); S.t0 = performance.now(); go(-1); });
$('bw-play').addEventListener('click', () => { if (S.w) play(); });
$('bw-pause').addEventListener('click', stop);
$('bw-pace').addEventListener('change', () => { if (S.timer) play(); });
$('bw-token').addEventListener('input', (e) => { stop(); S.t = Number(e.target.value); S.t0 = performance.now(); draw(); });
$('bw-diff').addEventListener('change', () => { S.layout = null; S.t0 = performance.now(); draw(); });
// a link's token and stage (?tab=primer&walk_token=5&walk_stage=state, tour.links.PAGE_HELD): shown by the
// first walk the link draws (not the page's default one); a bad value is left out (the server said so)
S.pending = (() => {
  const q = new URLSearchParams(location.search), t = Number(q.get('walk_token')), s = q.get('walk_stage');
  if (q.get('tab') !== 'primer' || (q.get('walk_token') === null && s === null)) return null;
  return {t: Number.isInteger(t) && t >= 0 ? t : null, s};
})();
const fresh = () => {
  const v = props.value;  // the page's default walk never replaces one already walked (a link's, a click's)
  if (v && v.opening && S.w && S.w.h && !S.w.opening) return;
  // the same text again (another layer, head or start): the walk stays at its token and stage
  const same = S.w && S.w.h && v && v.h && v.T === S.w.T && JSON.stringify(v.tokens) === JSON.stringify(S.w.tokens);
  const was = [S.t, S.s];
  stop(); load(v);
  if (!(S.w && S.w.h)) return;
  if (S.pending && !v.opening) {
    const p = S.pending, s = STAGES[S.w.family].findIndex((x) => x[0] === p.s);
    S.pending = null;
    S.t = p.t === null ? 0 : Math.min(p.t, S.w.T - 1); S.s = s < 0 ? 4 : s;
  } else if (same) [S.t, S.s] = was;
  else S.s = 4;
  draw();
};
watch('value', fresh);
fresh();
"""
